"""strata.keras.losses: the losses the runtime computes, by name or object."""


class Loss:
    name = None

    def __init__(self, from_logits=False, reduction="auto", name=None):
        if reduction not in ("auto", "sum_over_batch_size"):
            raise ValueError("%s: `reduction` %r is not supported (the runtime's "
                             "loss is the mean over the batch: 'auto' or "
                             "'sum_over_batch_size')" % (type(self).__name__, reduction))
        self.from_logits = bool(from_logits)
        self.reduction = reduction
        if name:
            self.display_name = name

    def get_config(self):
        return {"name": self.name, "from_logits": self.from_logits,
                "reduction": self.reduction}


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
_CLASSES = {"sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
            "categorical_crossentropy": CategoricalCrossentropy,
            "binary_crossentropy": BinaryCrossentropy, "mse": MeanSquaredError}


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


def get_class(name):
    return _CLASSES[_ALIASES[name]]
