"""Custom training loops: tf.GradientTape over a Strata model's call and a
Keras loss, applied by optimizer.apply_gradients, under OneDevice and
Mirrored strategies (strategy.run / reduce).

The tape records what the step computes: the model called on a batch
(`model(x, training=True)`), a Keras loss object on its output and the
labels, and tf.nn.compute_average_loss over the per-example losses. The
gradients `tape.gradient(loss, model.trainable_variables)` gives stand for
that recorded computation; `optimizer.apply_gradients` runs it in C++: one
optimizer step (forward, backward, update) on the batch, or, under a
strategy with several replicas, on all the replicas' batches together once
each replica has applied its gradients (the sum of the replicas' gradients
of the loss averaged over the global batch, as tf.distribute all-reduces
them). The values the step returns (the model's outputs, the loss) are
computed here too, for metrics and reporting (the outputs in inference
mode: without dropout, with the moving statistics).

What the tape does not record fails naming it: gradients of anything but
such a loss, arithmetic on gradients (clipping, scaling), or applying
gradients to only some of a model's variables.
"""
import threading

import numpy as np

_local = threading.local()


def _tapes():
    if not hasattr(_local, "tapes"):
        _local.tapes = []
    return _local.tapes


def recording():
    """True inside a GradientTape's `with` block on this thread."""
    return bool(_tapes())


class ModelOutput(np.ndarray):
    """A model's outputs on a batch, computed inside a tape: an array that
    remembers the model and its (joined) inputs."""

    def __array_finalize__(self, obj):
        self._model = getattr(obj, "_model", None)
        self._x = getattr(obj, "_x", None)


def model_output(values, model, x):
    out = np.asarray(values).view(ModelOutput)
    out._model, out._x = model, x
    return out


class TapeLoss(np.ndarray):
    """A loss computed from a ModelOutput: its value, and what the tape needs
    to compute its gradient (the model, the batch, the Keras loss, and the
    number of examples the loss is averaged over)."""

    def __array_finalize__(self, obj):
        self._record = getattr(obj, "_record", None)

    def __add__(self, other):
        if np.ndim(other) == 0 and float(other) == 0.0:
            return self  # `loss += 0` (no regularization losses)
        return _refuse("adding %r to a recorded loss" % (type(other).__name__,),
                       "the model's kernel_regularizer (it is in the runtime's loss)")

    __radd__ = __add__

    def __mul__(self, other):
        return _refuse("multiplying a recorded loss",
                       "tf.nn.compute_average_loss for the averaging")

    __rmul__ = __mul__
    __truediv__ = __mul__


def tape_loss(value, record):
    out = np.asarray(value, dtype=np.float32).view(TapeLoss)
    out._record = record
    return out


def _refuse(what, instead):
    raise TypeError("GradientTape: %s is not recorded: the tape records a model's "
                    "call, a Keras loss on its output and tf.nn.compute_average_loss; "
                    "use %s" % (what, instead))


class _Gradient:
    """A gradient the tape gives: it stands for the recorded step."""

    def __init__(self, record, variable):
        self._record = record
        self._variable = variable

    def __array__(self, dtype=None):
        _refuse("reading a gradient's values", "optimizer.apply_gradients directly")

    def _arith(self, *args, **kwargs):
        _refuse("arithmetic on a gradient (clipping, scaling)",
                "the optimizer's learning rate, or model.fit")

    __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __sub__ = __neg__ = _arith


class GradientTape:
    """tf.GradientTape: records the step in its `with` block."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self.persistent = persistent

    def __enter__(self):
        _tapes().append(self)
        return self

    def __exit__(self, *exc):
        _tapes().remove(self)
        return False

    def watch(self, tensor):
        pass

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=None):
        record = getattr(target, "_record", None)
        if not isinstance(target, TapeLoss) or record is None:
            _refuse("the gradient of a %s" % type(target).__name__,
                    "a Keras loss object called on the model's output inside the "
                    "tape (and tf.nn.compute_average_loss)")
        if record.get("per_example"):
            _refuse("the gradient of per-example losses",
                    "tf.nn.compute_average_loss(per_example_loss) (or a loss with "
                    "the default reduction)")
        single = not isinstance(sources, (list, tuple))
        srcs = [sources] if single else list(sources)
        for v in srcs:
            if getattr(v, "_model", None) is not record["model"]:
                _refuse("a gradient with respect to %r" % (v,),
                        "model.trainable_variables of the model called in the tape")
        grads = [_Gradient(record, v) for v in srcs]
        return grads[0] if single else grads


class Variable:
    """One of a model's variables (model.trainable_variables): its name
    ("dense/kernel"), shape and current value (numpy())."""

    def __init__(self, model, layer, name, shape, trainable):
        self._model = model
        self.name = "%s/%s:0" % (layer, name)
        self._key = (layer, name)
        self.shape = tuple(shape)
        self.trainable = trainable

    def numpy(self):
        for (l, n, _, _), w in zip(self._model._layout(), self._model.get_weights()):
            if (l, n) == self._key:
                return w
        raise KeyError(self.name)

    def __repr__(self):
        return "<strata Variable %r shape=%s>" % (self.name, self.shape)


def apply_gradients(optimizer, grads_and_vars):
    """optimizer.apply_gradients for the tape's gradients."""
    from . import distribute as _distribute
    pairs = list(grads_and_vars)
    if not pairs:
        raise ValueError("apply_gradients: no gradients given")
    records = {id(g._record): g._record for g, _ in pairs if isinstance(g, _Gradient)}
    if len(records) != 1 or not all(isinstance(g, _Gradient) for g, _ in pairs):
        _refuse("applying gradients that are not one recorded step's",
                "the list tape.gradient(loss, model.trainable_variables) returned")
    record = next(iter(records.values()))
    model = record["model"]
    names = {v._key for _, v in pairs}
    wanted = {(l, n) for l, n, _, t in model._layout() if t}
    if names != wanted:
        _refuse("applying gradients to some of the model's variables only",
                "all of model.trainable_variables")
    ctx = getattr(_distribute._local, "replica", None)
    n = ctx.num_replicas_in_sync if ctx is not None else 1
    pending = optimizer.__dict__.setdefault("_tape_pending", [])
    pending.append(record)
    if len(pending) < n:
        return None  # the other replicas' gradients come next
    optimizer._tape_pending = []
    total = sum(r["examples"] for r in pending)
    averaged = pending[0]["average_over"]
    if averaged is not None and averaged != total:
        raise ValueError("apply_gradients: the loss was averaged over "
                         "global_batch_size=%d examples but the step has %d: pass "
                         "tf.nn.compute_average_loss the global batch size" % (
                             averaged, total))
    x = np.concatenate([r["x"] for r in pending])
    y = np.concatenate([r["y"] for r in pending])
    _ensure_compiled(model, optimizer, record)
    model.train_on_batch(x, y)
    return None


def _ensure_compiled(model, optimizer, record):
    """The model compiled (its weights kept) with this optimizer and the
    recorded loss, the first time (or when either changes)."""
    from .keras import losses as _losses
    key = (id(optimizer), record["loss"], record["from_logits"])
    if getattr(model, "_tape_compiled", None) == key and model._native is not None:
        return
    loss = _losses.get_class(record["loss"])(from_logits=record["from_logits"])
    if model._native is not None:
        model._inference_only = True  # keep the weights across the compile
    model.compile(optimizer=optimizer, loss=loss)
    model._tape_compiled = key


class _Nn:
    """tf.nn: the averaging of per-example losses custom loops use."""

    @staticmethod
    def compute_average_loss(per_example_loss, sample_weight=None,
                             global_batch_size=None):
        from . import distribute as _distribute
        if sample_weight is not None:
            raise ValueError("compute_average_loss: `sample_weight` is not supported")
        values = np.asarray(per_example_loss, dtype=np.float64)
        if global_batch_size is None:
            ctx = getattr(_distribute._local, "replica", None)
            global_batch_size = values.size * (ctx.num_replicas_in_sync if ctx else 1)
        total = float(values.sum()) / float(global_batch_size)
        record = getattr(per_example_loss, "_record", None)
        if record is None:
            return np.float32(total)
        record = dict(record, per_example=False, average_over=int(global_batch_size))
        return tape_loss(total, record)

    @staticmethod
    def scale_regularization_loss(regularization_loss):
        from . import distribute as _distribute
        ctx = getattr(_distribute._local, "replica", None)
        return np.asarray(regularization_loss) / (ctx.num_replicas_in_sync if ctx else 1)

    @staticmethod
    def softmax(logits, axis=-1, name=None):
        from .ops import math
        return math.softmax(logits, axis)

    @staticmethod
    def sigmoid(x, name=None):
        from .ops import math
        return math.sigmoid(x)

    @staticmethod
    def relu(x, name=None):
        return np.maximum(np.asarray(x), 0)


nn = _Nn()


def add_n(inputs, name=None):
    inputs = list(inputs)
    if not inputs:
        raise ValueError("add_n: `inputs` must not be empty")
    return sum(np.asarray(i) for i in inputs[1:]) + np.asarray(inputs[0])
