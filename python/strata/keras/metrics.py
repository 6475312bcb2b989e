"""strata.keras.metrics: accuracy (computed by the runtime with each step),
and metrics computed here, over the model's predictions, vectorized with
numpy: AUC, Precision, Recall, SparseTopKCategoricalAccuracy,
TopKCategoricalAccuracy, MeanSquaredError, MeanAbsoluteError.

The runtime reports the training loss and accuracy as running means over
an epoch's steps, as Keras does. A metric computed here is the value over
the whole training set with the weights at the epoch's end (and over the
validation data for its val_ entry); under a cluster strategy, whose run is
one cluster fit, it is in the last epoch's logs and in evaluate's."""
import numpy as np


class Metric:
    """A metric by Keras's class; `_native` names what the runtime
    computes ("accuracy"), else `compute` gives it from labels and
    probabilities. Standalone, as Keras's: update_state(y_true, y_pred)
    accumulates (y_pred probabilities, one row per example), result()
    gives the metric over everything accumulated, reset_state() empties."""

    name = "accuracy"
    _native = "accuracy"

    def __init__(self, name=None, dtype=None):
        if name:
            self.name = name
        self._seen = []

    def compute(self, labels, probs):
        labels = np.asarray(labels).reshape(-1)
        if probs.shape[1] == 1:
            return float(np.mean((probs[:, 0] > 0.5) == (labels == 1)))
        return float(np.mean(np.argmax(probs, axis=1) == labels))

    def update_state(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("%s.update_state: `sample_weight` is not supported"
                             % type(self).__name__)
        y_true = np.asarray(y_true)
        y_pred = np.asarray(y_pred, dtype=np.float64)
        if y_pred.ndim == 1:
            y_pred = y_pred[:, None]
        if y_true.ndim == 2 and y_true.shape[1] > 1:
            y_true = y_true.argmax(axis=1)  # one-hot labels
        self._seen.append((y_true.reshape(-1).astype(np.int64), y_pred))

    def result(self):
        if not self._seen:
            return np.float32(0.0)
        labels = np.concatenate([l for l, _ in self._seen])
        probs = np.concatenate([p for _, p in self._seen])
        return np.float32(self.compute(labels, probs))

    def reset_state(self):
        self._seen = []

    reset_states = reset_state

    def __call__(self, y_true, y_pred, sample_weight=None):
        self.update_state(y_true, y_pred, sample_weight)
        return self.result()


class Mean(Metric):
    """The running mean of the values given to update_state (a loss in a
    custom loop)."""

    _native = None

    def __init__(self, name="mean", dtype=None):
        super().__init__(name, dtype)
        self._total, self._count = 0.0, 0

    def update_state(self, values, sample_weight=None):
        v = np.asarray(values, dtype=np.float64)
        self._total += float(v.sum())
        self._count += int(v.size)

    def result(self):
        return np.float32(self._total / self._count if self._count else 0.0)

    def reset_state(self):
        self._total, self._count = 0.0, 0

    reset_states = reset_state

    def __call__(self, values, sample_weight=None):
        self.update_state(values, sample_weight)
        return self.result()


class Accuracy(Metric):
    pass


class SparseCategoricalAccuracy(Metric):
    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(name, dtype)


class CategoricalAccuracy(Metric):
    def __init__(self, name="categorical_accuracy", dtype=None):
        super().__init__(name, dtype)


def _threshold(cls, arg, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise ValueError("%s: `%s` must be a number (one threshold), got %r"
                         % (cls, arg, value))
    return float(value)


class BinaryAccuracy(Metric):
    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        super().__init__(name, dtype)
        self.threshold = _threshold("BinaryAccuracy", "threshold", threshold)
        if threshold != 0.5:
            self._native = None

    def compute(self, labels, probs):
        return float(np.mean((_positive_prob(probs) > self.threshold) == (labels == 1)))


def _positive_prob(probs):
    """A binary model's probability of class 1 (one sigmoid unit, or the
    second of two softmax units)."""
    return probs[:, 0] if probs.shape[1] == 1 else probs[:, 1]


class AUC(Metric):
    """Area under the ROC curve of a binary model (exact, from ranks:
    Mann-Whitney; Keras's default approximates it with 200 thresholds)."""

    _native = None

    def __init__(self, num_thresholds=200, curve="ROC", summation_method="interpolation",
                 name="auc", dtype=None, thresholds=None, multi_label=False,
                 num_labels=None, label_weights=None, from_logits=False):
        super().__init__(name, dtype)
        if curve != "ROC":
            raise ValueError("AUC: `curve` %r is not supported (only 'ROC')" % (curve,))
        if multi_label:
            raise ValueError("AUC: `multi_label=True` is not supported")

    def compute(self, labels, probs):
        score = _positive_prob(probs)
        pos = labels == 1
        n_pos, n_neg = int(pos.sum()), int((~pos).sum())
        if n_pos == 0 or n_neg == 0:
            return 0.0
        order = np.argsort(score, kind="mergesort")
        ranks = np.empty(len(score), dtype=np.float64)
        sorted_scores = score[order]
        # Average ranks over ties.
        _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
        avg = first + (counts + 1) / 2.0
        ranks[order] = np.repeat(avg, counts)
        return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


class Precision(Metric):
    _native = None

    def __init__(self, thresholds=None, top_k=None, class_id=None, name="precision",
                 dtype=None):
        super().__init__(name, dtype)
        if top_k is not None or class_id is not None:
            raise ValueError("%s: `top_k` and `class_id` are not supported"
                             % type(self).__name__)
        self.threshold = 0.5 if thresholds is None else \
            _threshold(type(self).__name__, "thresholds", thresholds)

    def _counts(self, labels, probs):
        pred = _positive_prob(probs) > self.threshold
        truth = labels == 1
        return (int((pred & truth).sum()), int((pred & ~truth).sum()),
                int((~pred & truth).sum()))

    def compute(self, labels, probs):
        tp, fp, _ = self._counts(labels, probs)
        return tp / (tp + fp) if tp + fp else 0.0


class Recall(Precision):
    def __init__(self, thresholds=None, top_k=None, class_id=None, name="recall",
                 dtype=None):
        super().__init__(thresholds, top_k, class_id, name, dtype)

    def compute(self, labels, probs):
        tp, _, fn = self._counts(labels, probs)
        return tp / (tp + fn) if tp + fn else 0.0


class SparseTopKCategoricalAccuracy(Metric):
    _native = None

    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None):
        super().__init__(name, dtype)
        self.k = int(k)

    def compute(self, labels, probs):
        k = min(self.k, probs.shape[1])
        top = np.argpartition(-probs, k - 1, axis=1)[:, :k]
        return float(np.mean((top == labels[:, None]).any(axis=1)))


class TopKCategoricalAccuracy(SparseTopKCategoricalAccuracy):
    def __init__(self, k=5, name="top_k_categorical_accuracy", dtype=None):
        super().__init__(k, name, dtype)


class MeanSquaredError(Metric):
    """Against the one-hot labels (the label itself with one output)."""

    _native = None

    def __init__(self, name="mean_squared_error", dtype=None):
        super().__init__(name, dtype)

    @staticmethod
    def _target(labels, probs):
        if probs.shape[1] == 1:
            return labels[:, None].astype(np.float64)
        return np.eye(probs.shape[1])[labels]

    def compute(self, labels, probs):
        return float(np.mean((probs - self._target(labels, probs)) ** 2))


class MeanAbsoluteError(MeanSquaredError):
    def __init__(self, name="mean_absolute_error", dtype=None):
        super().__init__(name, dtype)

    def compute(self, labels, probs):
        return float(np.mean(np.abs(probs - self._target(labels, probs))))


_NAMES = ("accuracy", "acc", "sparse_categorical_accuracy", "categorical_accuracy",
          "binary_accuracy")
_BY_NAME = {"auc": AUC, "AUC": AUC, "precision": Precision, "recall": Recall,
            "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy,
            "top_k_categorical_accuracy": TopKCategoricalAccuracy,
            "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError,
            "mae": MeanAbsoluteError, "mean_absolute_error": MeanAbsoluteError}


def get(identifier):
    """(runtime metric or None, the name Keras reports it under, the metric
    object computing it here or None)."""
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        identifier = identifier()
    if isinstance(identifier, Mean):
        raise ValueError("compile: metric Mean (%r) is a standalone running mean "
                         "(update_state / result), not a model metric"
                         % identifier.name)
    if isinstance(identifier, Metric):
        if identifier._native:
            return identifier._native, identifier.name, None
        return None, identifier.name, identifier
    if isinstance(identifier, str) and identifier in _NAMES:
        return "accuracy", identifier, None
    if isinstance(identifier, str) and identifier in _BY_NAME:
        m = _BY_NAME[identifier]()
        return None, identifier if identifier not in ("AUC",) else "auc", m
    raise ValueError("Could not interpret metric identifier: %r (supported: %s)"
                     % (identifier, ", ".join(_NAMES + tuple(sorted(_BY_NAME)))))


def from_saved(entry):
    """A metric object from what a .keras file's compile_config holds for it
    ({"class_name", "name"})."""
    cls = globals().get(entry.get("class_name"))
    if not (isinstance(cls, type) and issubclass(cls, Metric)) or cls is Mean:
        raise ValueError("load_model: unknown metric %r" % (entry,))
    kwargs = {"name": entry.get("name")}
    if "k" in entry:
        kwargs["k"] = entry["k"]
    if "threshold" in entry:
        kwargs["thresholds" if issubclass(cls, Precision) else "threshold"] = \
            entry["threshold"]
    return cls(**kwargs)
