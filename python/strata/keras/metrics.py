"""strata.keras.metrics: accuracy (the metric the runtime reports)."""


class Metric:
    name = "accuracy"

    def __init__(self, name=None, dtype=None):
        if name:
            self.name = name


class Accuracy(Metric):
    pass


class SparseCategoricalAccuracy(Metric):
    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(name, dtype)


class CategoricalAccuracy(Metric):
    def __init__(self, name="categorical_accuracy", dtype=None):
        super().__init__(name, dtype)


class BinaryAccuracy(Metric):
    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        if threshold != 0.5:
            raise ValueError("BinaryAccuracy: only threshold=0.5 is supported")
        super().__init__(name, dtype)


_NAMES = ("accuracy", "acc", "sparse_categorical_accuracy", "categorical_accuracy",
          "binary_accuracy")


def get(identifier):
    """(runtime metric, the name Keras reports it under)."""
    if isinstance(identifier, Metric):
        return "accuracy", identifier.name
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        return get(identifier())
    if isinstance(identifier, str) and identifier in _NAMES:
        return "accuracy", identifier
    raise ValueError("Could not interpret metric identifier: %r (supported: %s)"
                     % (identifier, ", ".join(_NAMES)))
