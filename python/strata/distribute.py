"""strata.distribute: tf.distribute's strategies over Strata's.

    strategy = strata.distribute.MirroredStrategy()
    with strategy.scope():
        model = strata.keras.Sequential([...])   # bound to `strategy`

OneDeviceStrategy and MirroredStrategy train in this process. The others
start a local cluster (a coordinator, PS tasks and workers as processes on
127.0.0.1) for each ``fit``, sized by the cluster resolver (TF_CONFIG's
"ps" and "worker" counts) or the constructor's defaults, and read the
trained weights back, so ``evaluate`` and ``predict`` afterwards run here.
"""
import contextlib
import enum
import json
import os
import threading

from . import _strata
from ._bindir import bin_dir

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"


class PerReplica:
    """One value per replica that ran in this process."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return "PerReplica(%r)" % (self.values,)


class ReplicaContext:
    def __init__(self, strategy, replica_id):
        self.strategy = strategy
        self.replica_id_in_sync_group = replica_id
        self.num_replicas_in_sync = strategy.num_replicas_in_sync


class Strategy:
    """The base of the strategies: scope, run, reduce, and the native
    strategy fit trains under."""

    def __init__(self, native):
        self._native = native

    @property
    def num_replicas_in_sync(self):
        return self._native.num_replicas_in_sync

    @property
    def extended(self):
        return self

    @contextlib.contextmanager
    def scope(self):
        _stack().append(self)
        try:
            yield self
        finally:
            _stack().pop()

    def _local_replicas(self):
        return 1

    def run(self, fn, args=(), kwargs=None):
        """Calls fn(*args, **kwargs) once per replica of this process (with
        the replica's context current) and returns a PerReplica of the
        results, or the single result with one replica."""
        kwargs = kwargs or {}
        results = []
        for r in range(self._local_replicas()):
            _local.replica = ReplicaContext(self, r)
            try:
                results.append(fn(*args, **kwargs))
            finally:
                _local.replica = None
        return results[0] if len(results) == 1 else PerReplica(results)

    def reduce(self, reduce_op, value, axis=None):
        import numpy as np
        if isinstance(reduce_op, str):
            try:
                reduce_op = ReduceOp[reduce_op.upper()]
            except KeyError:
                raise ValueError("reduce: reduce_op must be SUM or MEAN, got %r"
                                 % (reduce_op,)) from None
        values = value.values if isinstance(value, PerReplica) else (value,)
        arrays = [np.asarray(v) for v in values]
        if axis is not None:
            arrays = [a.sum(axis=axis) if reduce_op == ReduceOp.SUM
                      else a.mean(axis=axis) for a in arrays]
        total = sum(arrays[1:], arrays[0])
        if reduce_op == ReduceOp.MEAN:
            total = total / len(arrays)
        return total

    def experimental_distribute_dataset(self, dataset, options=None):
        return dataset

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        return dataset_fn(None)

    def __repr__(self):
        return "<strata.distribute.%s: %d replicas in sync>" % (
            type(self).__name__, self.num_replicas_in_sync)


def get_strategy():
    """The innermost scope's strategy on this thread, else the default
    (one device)."""
    stack = _stack()
    return stack[-1] if stack else _default()


def has_strategy():
    return bool(_stack())


def get_replica_context():
    return getattr(_local, "replica", None) or ReplicaContext(get_strategy(), 0)


_DEFAULT = None


def _default():
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = OneDeviceStrategy("/cpu:0")
    return _DEFAULT


def _is_cpu(device):
    d = device.lower().lstrip("/")
    return d in ("cpu", "cpu:0", "device:cpu:0", "job:localhost/device:cpu:0")


def _gpu_name(device):
    d = device.lower().lstrip("/").replace("device:", "")
    if d.startswith("gpu:"):
        return "cuda:" + d[4:]
    if d == "gpu":
        return "cuda:0"
    return None


class OneDeviceStrategy(Strategy):
    """Trains in this process on one device ("/cpu:0")."""

    def __init__(self, device):
        if not isinstance(device, str) or not _is_cpu(device):
            raise ValueError("OneDeviceStrategy: device must be '/cpu:0' (this "
                             "strategy trains on the CPU), got %r" % (device,))
        self.worker_devices = (device,)
        super().__init__(_strata.one_device_strategy())


class MirroredStrategy(Strategy):
    """Replicas in this process, their gradients all-reduced every step.

    devices=None: one replica per visible GPU, else one on the CPU (as
    tf.distribute). A list of GPU names ("/gpu:0", "GPU:1") puts a replica
    on each (NCCL between them); CPU names ("/cpu:0", ...) one replica on
    the CPU per name."""

    def __init__(self, devices=None, cross_device_ops=None):
        if devices is None:
            try:
                native = _strata.mirrored_on_all_gpus()
            except Exception:  # no GPU: the CPU, as TensorFlow
                native = _strata.mirrored_strategy(1)
            self._replicas = native.num_replicas_in_sync
        else:
            if isinstance(devices, str):
                devices = [devices]
            devices = list(devices)
            if not devices:
                raise ValueError("MirroredStrategy: devices must not be empty")
            gpus = [_gpu_name(d) for d in devices]
            if all(g is not None for g in gpus):
                native = _strata.mirrored_on_devices(gpus)
            elif all(g is None for g in gpus):
                for d in devices:
                    if not d.lower().lstrip("/").replace("device:", "").startswith("cpu"):
                        raise ValueError("MirroredStrategy: %r is not a CPU or GPU "
                                         "device name" % (d,))
                native = _strata.mirrored_strategy(len(devices))
            else:
                raise ValueError("MirroredStrategy: mix of CPU and GPU devices %r"
                                 % (devices,))
            self._replicas = len(devices)
        super().__init__(native)

    def _local_replicas(self):
        return self._replicas


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError("%s: %r is not an integer" % (name, value)) from None


class _LocalCluster(Strategy):
    def __init__(self, native, num_ps, num_workers):
        self.num_ps = num_ps
        self.num_workers = num_workers
        super().__init__(native)


def _sizes(cluster_resolver, ps_default, workers_default):
    if cluster_resolver is None:
        return ps_default, workers_default
    spec = cluster_resolver.cluster_spec()
    return (spec.num_tasks("ps") or ps_default,
            spec.num_tasks("worker") or workers_default)


class ParameterServerStrategy(_LocalCluster):
    """Variables sharded over PS tasks; workers push asynchronously. The
    resolver's "ps" and "worker" counts size the local cluster each fit
    starts (2 and 2 without a resolver or TF_CONFIG)."""

    def __init__(self, cluster_resolver=None, variable_partitioner=None):
        if cluster_resolver is None and os.environ.get("TF_CONFIG"):
            from .cluster_resolver import TFConfigClusterResolver
            cluster_resolver = TFConfigClusterResolver()
        self.cluster_resolver = cluster_resolver
        num_ps, num_workers = _sizes(cluster_resolver, 2, 2)
        super().__init__(_strata.parameter_server_strategy(
            num_ps, num_workers, "async", bin_dir()), num_ps, num_workers)


class CentralStorageStrategy(_LocalCluster):
    """Every variable on one PS task; the workers' gradients of a step
    averaged there (STRATA_NUM_WORKERS workers, default 2)."""

    def __init__(self, compute_devices=None, parameter_device=None):
        num_workers = _env_int("STRATA_NUM_WORKERS", 2)
        super().__init__(_strata.central_storage_strategy(1, num_workers, bin_dir()),
                         1, num_workers)


class MultiWorkerMirroredStrategy(_LocalCluster):
    """A copy of the model on every worker, gradients all-reduced (a ring
    between the workers). TF_CONFIG's "worker" count, else
    STRATA_NUM_WORKERS (default 2), sizes the local cluster."""

    def __init__(self, cluster_resolver=None, communication_options=None):
        if cluster_resolver is None and os.environ.get("TF_CONFIG"):
            from .cluster_resolver import TFConfigClusterResolver
            cluster_resolver = TFConfigClusterResolver()
        self.cluster_resolver = cluster_resolver
        _, num_workers = _sizes(cluster_resolver, 0,
                                _env_int("STRATA_NUM_WORKERS", 2))
        super().__init__(_strata.multi_worker_mirrored_strategy(
            1, num_workers, "ring", bin_dir()), 0, num_workers)


from . import cluster_resolver  # noqa: E402  (tf.distribute.cluster_resolver)
