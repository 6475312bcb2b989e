"""strata.keras.layers: Dense, Dropout, Flatten, Embedding,
GlobalAveragePooling1D (and Input / InputLayer)."""
import numbers

_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax")


def _positive_int(layer, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError("%s: Received an invalid value for argument `%s`, "
                         "expected a positive integer, got %r" % (layer, name, value))
    return int(value)


def _shape(layer, name, value):
    if value is None:
        return None
    if isinstance(value, numbers.Integral):
        value = (value,)
    try:
        shape = tuple(value)
    except TypeError:
        raise ValueError("%s: `%s` must be a tuple of positive integers, got %r"
                         % (layer, name, value)) from None
    if not shape or any(isinstance(d, bool) or not isinstance(d, numbers.Integral)
                        or d < 1 for d in shape):
        raise ValueError("%s: `%s` must be a tuple of positive integers, got %r"
                         % (layer, name, value))
    return tuple(int(d) for d in shape)


class Layer:
    def __init__(self, name=None, input_shape=None, **kwargs):
        unknown = set(kwargs) - {"dtype", "trainable", "batch_input_shape"}
        if unknown:
            raise TypeError("%s: unexpected keyword argument(s) %s"
                            % (type(self).__name__, ", ".join(sorted(unknown))))
        if name is not None and not isinstance(name, str):
            raise TypeError("%s: `name` must be a string" % type(self).__name__)
        self.name = name
        bis = kwargs.get("batch_input_shape")
        if input_shape is None and bis is not None:
            input_shape = tuple(bis)[1:]
        self.input_shape = _shape(type(self).__name__, "input_shape", input_shape)

    def _spec(self):
        raise NotImplementedError

    def get_config(self):
        return dict(self._spec())


class InputLayer(Layer):
    """keras.Input(shape=...) / InputLayer: the model's input shape."""

    def __init__(self, input_shape=None, shape=None, name=None, **kwargs):
        super().__init__(name=name, input_shape=shape if shape is not None else input_shape,
                         **kwargs)
        if self.input_shape is None:
            raise ValueError("Input: `shape` is required")


def Input(shape=None, batch_size=None, name=None, dtype=None, **kwargs):
    return InputLayer(shape=shape, name=name)


class Dense(Layer):
    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 input_dim=None, input_shape=None, name=None, **kwargs):
        if input_dim is not None:
            input_shape = (_positive_int("Dense", "input_dim", input_dim),)
        super().__init__(name=name, input_shape=input_shape, **kwargs)
        self.units = _positive_int("Dense", "units", units)
        if activation is None:
            activation = "linear"
        if callable(activation):
            activation = getattr(activation, "__name__", "")
        if activation not in _ACTIVATIONS:
            raise ValueError("Dense: Unknown activation function: %r; expected one "
                             "of %s" % (activation, ", ".join(_ACTIVATIONS)))
        self.activation = activation
        self.use_bias = bool(use_bias)
        for arg, value, allowed in (("kernel_initializer", kernel_initializer,
                                     ("glorot_uniform",)),
                                    ("bias_initializer", bias_initializer, ("zeros",))):
            if value not in allowed:
                raise ValueError("Dense: `%s` %r is not supported (only %s)"
                                 % (arg, value, ", ".join(allowed)))

    def _spec(self):
        spec = {"type": "dense", "units": self.units, "activation": self.activation,
                "use_bias": self.use_bias}
        if self.name:
            spec["name"] = self.name
        if self.input_shape:
            spec["input_shape"] = list(self.input_shape)
        return spec


class Dropout(Layer):
    def __init__(self, rate, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError("Dropout: Invalid value received for `rate`, expected a "
                             "value between 0 and 1, got: %r" % (rate,))
        if noise_shape is not None:
            raise ValueError("Dropout: `noise_shape` is not supported")
        self.rate = float(rate)

    def _spec(self):
        spec = {"type": "dropout", "rate": self.rate}
        if self.name:
            spec["name"] = self.name
        if self.input_shape:
            spec["input_shape"] = list(self.input_shape)
        return spec


class Flatten(Layer):
    def __init__(self, data_format=None, name=None, input_shape=None, **kwargs):
        super().__init__(name=name, input_shape=input_shape, **kwargs)

    def _spec(self):
        spec = {"type": "flatten"}
        if self.name:
            spec["name"] = self.name
        if self.input_shape:
            spec["input_shape"] = list(self.input_shape)
        return spec


class Embedding(Layer):
    """keras.layers.Embedding: integer ids in [0, input_dim) -> rows of
    `output_dim` values. The rows are a dynamic embedding table (made on
    first touch from the seed, trained where the table lives: here, or on the
    PS tasks under ParameterServerStrategy) rather than an input_dim x
    output_dim matrix, so get_weights() holds the dense layers' weights only.

    It must be the model's first layer, followed by Flatten (the rows of the
    `input_length` <= 26 ids side by side) or GlobalAveragePooling1D (their
    mean; any input_length), then Dense layers ending in one sigmoid unit
    with binary_crossentropy: the models of Keras's text and click-through
    tutorials. The table trains with the compiled optimizer's counterpart
    for rows: SGD as sgd, Adam as lazy Adam, Adagrad as adagrad."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, activity_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, input_length=None,
                 sparse=False, name=None, input_shape=None, **kwargs):
        if input_length is not None and input_shape is None:
            input_shape = (_positive_int("Embedding", "input_length", input_length),)
        super().__init__(name=name, input_shape=input_shape, **kwargs)
        self.input_dim = _positive_int("Embedding", "input_dim", input_dim)
        self.output_dim = _positive_int("Embedding", "output_dim", output_dim)
        if self.output_dim > 4096:
            raise ValueError("Embedding: `output_dim` must be at most 4096, got %d"
                             % self.output_dim)
        if embeddings_initializer not in ("uniform", "random_uniform"):
            raise ValueError("Embedding: `embeddings_initializer` %r is not supported "
                             "(only 'uniform': RandomUniform(-0.05, 0.05))"
                             % (embeddings_initializer,))
        for arg, value in (("embeddings_regularizer", embeddings_regularizer),
                           ("activity_regularizer", activity_regularizer),
                           ("embeddings_constraint", embeddings_constraint)):
            if value is not None:
                raise ValueError("Embedding: `%s` is not supported" % arg)
        if mask_zero:
            raise ValueError("Embedding: `mask_zero=True` is not supported (id 0 is a "
                             "row like any other)")
        if self.input_shape is not None and len(self.input_shape) != 1:
            raise ValueError("Embedding: the input is 1-D per example (input_length "
                             "ids), got input_shape %r" % (self.input_shape,))

    def _spec(self):
        spec = {"type": "embedding", "input_dim": self.input_dim,
                "output_dim": self.output_dim}
        if self.name:
            spec["name"] = self.name
        if self.input_shape:
            spec["input_shape"] = list(self.input_shape)
        return spec


class GlobalAveragePooling1D(Layer):
    """keras.layers.GlobalAveragePooling1D: after an Embedding, the mean of its
    rows (steps axis 1, channels last)."""

    def __init__(self, data_format="channels_last", keepdims=False, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if data_format != "channels_last":
            raise ValueError("GlobalAveragePooling1D: `data_format` %r is not supported "
                             "(only 'channels_last')" % (data_format,))
        if keepdims:
            raise ValueError("GlobalAveragePooling1D: `keepdims=True` is not supported")

    def _spec(self):
        spec = {"type": "global_average_pooling1d"}
        if self.name:
            spec["name"] = self.name
        return spec
