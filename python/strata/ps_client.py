"""strata.PsClient: a Strata parameter server from Python, numpy in and out.

    ps = strata.PsClient("127.0.0.1:5000")
    ps.create_variable("w", shape=(784, 10), initializer="glorot_uniform",
                       optimizer=strata.keras.optimizers.SGD(0.1))
    w = ps.pull("w")                 # a numpy array over the pulled bytes
    ps.pull("w", out=w)              # into an existing array, in place
    ps.push("w", grad, step=3)       # exactly once per (job, worker, step)

Pulls never copy: without `out` the array is a view of the received
buffer; with `out` (C-contiguous, writeable, the variable's dtype) the
bytes land in it. Pushes send C-contiguous arrays as they are (others are
made contiguous first) and cast to the variable's dtype when this client
knows it (created or listed here). Every call releases the GIL; errors
raise strata.errors classes carrying the server's status message.
"""
import numpy as np

from . import _strata
from .keras import optimizers as _optimizers

_INITIALIZERS = ("zeros", "ones", "constant", "random_uniform", "random_normal",
                 "truncated_normal", "glorot_uniform", "glorot_normal", "he_normal",
                 "he_uniform")


def _initializer(init, seed):
    if isinstance(init, str):
        if init not in _INITIALIZERS:
            raise ValueError("create_variable: `initializer` %r is not one of %s"
                             % (init, ", ".join(_INITIALIZERS)))
        return {"type": init, "seed": seed}
    if isinstance(init, dict) and "type" in init:
        spec = dict(init)
        spec.setdefault("seed", seed)
        return spec
    raise ValueError("create_variable: `initializer` must be a name or a dict with "
                     "'type', got %r" % (init,))


def _optimizer(opt):
    if isinstance(opt, str) and opt == "assign_add":
        return {"type": "assign_add"}
    return _optimizers.get(opt)._spec()


class PsClient:
    def __init__(self, target, deadline=60.0, token=None, job="python", worker=0):
        if not isinstance(target, str) or ":" not in target:
            raise ValueError("PsClient: `target` must be 'host:port', got %r" % (target,))
        self._native = _strata.PsClient(target, float(deadline), token or "")
        self._native_target = target
        self.job = job
        self.worker = worker
        self._dtypes = {}

    def create_variable(self, name, shape, dtype="float32", initializer="zeros",
                        optimizer="sgd", update="async", num_replicas=0, staleness=0,
                        seed=0):
        """Creates the variable; True when created, False when an identical
        one existed (ALREADY_EXISTS for a different one)."""
        dt = np.dtype(dtype)
        shape = tuple(int(d) for d in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
        created = self._native.create_variable({
            "name": name, "dtype": dt, "shape": list(shape),
            "initializer": _initializer(initializer, seed),
            "optimizer": _optimizer(optimizer),
            "update": {"kind": update, "num_replicas": num_replicas,
                       "staleness": staleness}})
        self._dtypes[name] = dt
        return created

    def pull(self, name, out=None, min_version=0, return_version=False):
        array, version = self._native.pull(name, out, int(min_version))
        return (array, version) if return_version else array

    def pull_rows(self, name, ids, width=None, dtype=None, return_version=False):
        """Rows `ids` of a 2-D variable: an array of len(ids) x width."""
        if width is None or dtype is None:
            info = self._info(name)
            width = info["shape"][1] if width is None else width
            dtype = info["dtype"] if dtype is None else dtype
        array, version = self._native.pull_rows(name, np.asarray(ids), int(width),
                                                np.dtype(dtype))
        return (array, version) if return_version else array

    def push(self, name, grad, step, worker=None, job=None):
        grad = self._cast(name, grad)
        return self._native.push(name, grad, job or self.job,
                                 self.worker if worker is None else worker, int(step))

    def push_rows(self, name, ids, grads, step, worker=None, job=None):
        grads = self._cast(name, grads)
        return self._native.push_rows(name, np.asarray(ids), grads, job or self.job,
                                      self.worker if worker is None else worker,
                                      int(step))

    def assign(self, name, value):
        """Replaces the variable's value (the optimizer's slots stay); returns
        the new version."""
        return self._native.assign(name, self._cast(name, value))

    def save(self, path):
        return self._native.save(str(path))

    def restore(self, path):
        return self._native.restore(str(path))

    def list_variables(self):
        variables = self._native.list_variables()
        for v in variables:
            self._dtypes[v["name"]] = np.dtype(v["dtype"])
        return variables

    def _info(self, name):
        for v in self.list_variables():
            if v["name"] == name:
                return v
        from .errors import NotFoundError
        raise NotFoundError("variable '%s' does not exist on this server" % name, 5)

    def _cast(self, name, a):
        dt = self._dtypes.get(name)
        a = np.asarray(a)
        if dt is not None and a.dtype != dt:
            a = a.astype(dt)
        return a
