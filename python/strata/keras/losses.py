"""strata.keras.losses: the losses the runtime computes, by name or object."""


import numpy as np

from .. import tape as _tape


class Reduction:
    """keras.losses.Reduction."""
    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"


class Loss:
    """A Keras loss: by name to compile, or called on (y_true, y_pred) as
    Keras's loss objects are (in custom training loops: on a model's
    output inside a GradientTape it is recorded for the gradient)."""

    name = None

    def __init__(self, from_logits=False, reduction="auto", name=None):
        if reduction not in ("auto", "none", "sum", "sum_over_batch_size"):
            raise ValueError("%s: Invalid Reduction Key: %r. Expected keys are "
                             "\"auto\", \"none\", \"sum\", \"sum_over_batch_size\""
                             % (type(self).__name__, reduction))
        self.from_logits = bool(from_logits)
        self.reduction = reduction
        if name:
            self.display_name = name

    def get_config(self):
        return {"name": self.name, "from_logits": self.from_logits,
                "reduction": self.reduction}

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("%s: `sample_weight` is not supported"
                             % type(self).__name__)
        pred = np.asarray(y_pred, dtype=np.float64)
        if pred.ndim == 1:
            pred = pred[:, None]
        labels = _class_labels(self.name, y_true, pred)
        per = _per_example(self.name, labels, np.asarray(y_true), pred, self.from_logits,
                           getattr(self, "delta", 1.0))
        if self.reduction == "none":
            value, record_mean = per.astype(np.float32), False
        elif self.reduction == "sum":
            value, record_mean = np.float32(per.sum()), None
        else:
            value, record_mean = np.float32(per.mean()), True
        if not isinstance(y_pred, _tape.ModelOutput) or not _tape.recording():
            return value
        if record_mean is None:
            return _tape._refuse("a loss with reduction 'sum'",
                                 "reduction 'none' and tf.nn.compute_average_loss")
        record = {"model": y_pred._model, "x": y_pred._x, "y": labels,
                  "loss": self.name, "from_logits": self.from_logits,
                  "examples": len(labels), "per_example": not record_mean,
                  "average_over": len(labels) if record_mean else None}
        return _tape.tape_loss(value, record)


def _class_labels(loss, y_true, pred):
    y = np.asarray(y_true)
    if loss == "categorical_crossentropy" or (y.ndim == 2 and y.shape[1] > 1):
        return y.reshape(len(y), -1).argmax(axis=1).astype(np.int32)
    return y.reshape(-1).astype(np.int32)


def _log_probs(pred, from_logits):
    if from_logits:
        z = pred - pred.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return np.log(np.clip(pred, 1e-7, 1.0))


def _per_example(loss, labels, y_true, pred, from_logits, delta=1.0):
    n = len(labels)
    if loss in ("sparse_categorical_crossentropy", "categorical_crossentropy"):
        return -_log_probs(pred, from_logits)[np.arange(n), labels]
    if loss == "binary_crossentropy":
        t = labels.reshape(n, -1).astype(np.float64)
        if from_logits:
            z = pred
            return np.mean(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z))), axis=1)
        p = np.clip(pred, 1e-7, 1 - 1e-7)
        return -np.mean(t * np.log(p) + (1 - t) * np.log(1 - p), axis=1)
    # mse, mae and huber against the one-hot labels (the label itself with
    # one output), as the runtime computes them
    target = (np.eye(pred.shape[1])[labels] if pred.shape[1] > 1
              else labels[:, None].astype(np.float64))
    d = pred - target
    if loss == "mae":
        return np.mean(np.abs(d), axis=1)
    if loss == "huber":
        a = np.abs(d)
        return np.mean(np.where(a <= delta, 0.5 * d * d, delta * (a - 0.5 * delta)),
                       axis=1)
    return np.mean(d ** 2, axis=1)


class SparseCategoricalCrossentropy(Loss):
    name = "sparse_categorical_crossentropy"


class CategoricalCrossentropy(Loss):
    name = "categorical_crossentropy"


class BinaryCrossentropy(Loss):
    name = "binary_crossentropy"


class MeanSquaredError(Loss):
    name = "mse"

    def __init__(self, reduction="auto", name=None):
        super().__init__(False, reduction, name)


class MeanAbsoluteError(Loss):
    name = "mae"

    def __init__(self, reduction="auto", name=None):
        super().__init__(False, reduction, name)


class Huber(Loss):
    """keras.losses.Huber: 0.5 * d^2 where |d| <= delta, else
    delta * (|d| - 0.5 * delta)."""
    name = "huber"

    def __init__(self, delta=1.0, reduction="auto", name=None):
        try:
            delta = float(delta)
        except (TypeError, ValueError):
            raise ValueError("Huber: `delta` must be a number, got %r" % (delta,)) from None
        if not np.isfinite(delta) or delta <= 0:
            raise ValueError("Huber: `delta` must be > 0, got %r" % (delta,))
        super().__init__(False, reduction, name)
        self.delta = delta

    def get_config(self):
        config = super().get_config()
        config["delta"] = self.delta
        return config


_ALIASES = {"sparse_categorical_crossentropy": "sparse_categorical_crossentropy",
            "categorical_crossentropy": "categorical_crossentropy",
            "binary_crossentropy": "binary_crossentropy",
            "mse": "mse", "mean_squared_error": "mse",
            "mae": "mae", "mean_absolute_error": "mae",
            "huber": "huber", "huber_loss": "huber"}
_CLASSES = {"sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
            "categorical_crossentropy": CategoricalCrossentropy,
            "binary_crossentropy": BinaryCrossentropy, "mse": MeanSquaredError,
            "mae": MeanAbsoluteError, "huber": Huber}


def get(identifier):
    """The runtime's loss name for a Keras name or loss object."""
    if isinstance(identifier, Loss):
        return identifier.name
    if isinstance(identifier, type) and issubclass(identifier, Loss):
        return identifier.name
    if isinstance(identifier, str) and identifier in _ALIASES:
        return _ALIASES[identifier]
    raise ValueError("Could not interpret loss identifier: %r (expected one of %s)"
                     % (identifier, ", ".join(sorted(_ALIASES))))


def from_logits(identifier):
    """Whether the loss takes logits (a loss object made with from_logits=True)."""
    return bool(isinstance(identifier, Loss) and identifier.from_logits)


def delta(identifier):
    """The Huber loss's delta (1.0, Keras's default, for every other loss)."""
    return float(getattr(identifier, "delta", 1.0)) if isinstance(identifier, Loss) else 1.0


def get_class(name):
    return _CLASSES[_ALIASES[name]]
