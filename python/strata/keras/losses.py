"""strata.keras.losses: the losses the runtime computes, by name or object."""


class Loss:
    name = None

    def __init__(self, from_logits=False, reduction="auto", name=None):
        if from_logits:
            raise ValueError("%s: from_logits=True is not supported (end the model "
                             "with a softmax or sigmoid activation)" % type(self).__name__)
        if name:
            self.display_name = name


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


_ALIASES = {"sparse_categorical_crossentropy": "sparse_categorical_crossentropy",
            "categorical_crossentropy": "categorical_crossentropy",
            "binary_crossentropy": "binary_crossentropy",
            "mse": "mse", "mean_squared_error": "mse"}


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
