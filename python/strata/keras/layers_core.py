"""strata.keras.layers (layers_core): Dense, Activation, Dropout, Flatten,
Reshape and Embedding. strata.keras.layers re-exports every name here."""
import numbers

from .layers_args import (_REQUIRED, _SHORT_ACTIVATIONS, _activation,
                          _check_channels_last, _check_constraints,
                          _check_initializers, _check_regularizers, _positive_int)
from .layers_base import Layer, _make_layer


def _check_dense(layer, c):
    c["units"] = _positive_int(layer, "units", c["units"])
    c["activation"] = _activation(layer, c["activation"])
    c["use_bias"] = bool(c["use_bias"])
    _check_initializers(layer, c, "kernel_initializer", "bias_initializer")
    _check_regularizers(layer, c, "kernel_regularizer", "bias_regularizer")
    _check_constraints(layer, c, "kernel_constraint", "bias_constraint")
    if c.get("activity_regularizer") is not None:
        raise ValueError("%s: `activity_regularizer` is not supported" % layer)
    c.pop("activity_regularizer", None)


_DENSE_ARGS = [("units", _REQUIRED), ("activation", None), ("use_bias", True),
               ("kernel_initializer", "glorot_uniform"), ("bias_initializer", "zeros"),
               ("kernel_regularizer", None), ("bias_regularizer", None),
               ("activity_regularizer", None), ("kernel_constraint", None),
               ("bias_constraint", None)]

_DenseBase = _make_layer("Dense", _DENSE_ARGS, _check_dense)


class Dense(_DenseBase):
    """keras.layers.Dense: activation(x @ kernel + bias), kernel [in, units]."""

    def _spec(self):
        c = self._config
        if (c["activation"] not in _SHORT_ACTIVATIONS
                or c["kernel_initializer"]["class_name"] != "GlorotUniform"
                or c["kernel_initializer"]["config"].get("seed") is not None
                or c["bias_initializer"]["class_name"] != "Zeros"
                or c["kernel_regularizer"] is not None or c["bias_regularizer"] is not None):
            return None
        return self._named_spec({"type": "dense", "units": c["units"],
                                 "activation": c["activation"],
                                 "use_bias": c["use_bias"]})


def _check_activation(layer, c):
    c["activation"] = _activation(layer, c["activation"])


Activation = _make_layer("Activation", [("activation", _REQUIRED)], _check_activation)


def _check_dropout(layer, c):
    rate = c["rate"]
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
        raise ValueError("%s: Invalid value received for `rate`, expected a value "
                         "between 0 and 1, got: %r" % (layer, rate))
    c["rate"] = float(rate)
    if c["noise_shape"] is not None:
        raise ValueError("%s: `noise_shape` is not supported" % layer)


_DropoutBase = _make_layer("Dropout", [("rate", _REQUIRED), ("noise_shape", None),
                                       ("seed", None)], _check_dropout)


class Dropout(_DropoutBase):
    """keras.layers.Dropout: zeroes a `rate` fraction in training."""

    def _spec(self):
        if self._config["seed"] is not None:
            return None
        return self._named_spec({"type": "dropout", "rate": self._config["rate"]})


_FlattenBase = _make_layer("Flatten", [("data_format", None)], _check_channels_last)


class Flatten(_FlattenBase):
    """keras.layers.Flatten: one example's values as one vector."""

    def _spec(self):
        return self._named_spec({"type": "flatten"})


def _check_reshape(layer, c):
    try:
        c["target_shape"] = [int(d) for d in c["target_shape"]]
    except (TypeError, ValueError):
        raise ValueError("%s: `target_shape` must be a tuple of integers, got %r"
                         % (layer, c["target_shape"])) from None


Reshape = _make_layer("Reshape", [("target_shape", _REQUIRED)], _check_reshape)


class Embedding(Layer):
    """keras.layers.Embedding: integer ids in [0, input_dim) -> rows of
    `output_dim` values.

    In a functional model (or a Sequential model whose first layer is not
    it) it is the runtime's Embedding layer: an input_dim x output_dim
    matrix, trained like any other weight. As the first layer of a
    Sequential model, followed by Flatten (the rows of the `input_length`
    <= 26 ids side by side) or GlobalAveragePooling1D (their mean; any
    input_length), then Dense layers ending in one sigmoid unit with
    binary_crossentropy, its rows are a dynamic embedding table (made on
    first touch from the seed, trained where the table lives: here, or on
    the PS tasks under ParameterServerStrategy), so get_weights() holds the
    dense layers' weights only; the table trains with the compiled
    optimizer's counterpart for rows: SGD as sgd, Adam as lazy Adam,
    Adagrad as adagrad."""

    _class_name = "Embedding"

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
        if sparse:
            raise ValueError("Embedding: `sparse=True` is not supported")
        if self.input_shape is not None and len(self.input_shape) != 1:
            raise ValueError("Embedding: the input is 1-D per example (input_length "
                             "ids), got input_shape %r" % (self.input_shape,))
        self._config = {"input_dim": self.input_dim, "output_dim": self.output_dim,
                        "embeddings_initializer": {"class_name": "RandomUniform",
                                                   "config": {"minval": -0.05,
                                                              "maxval": 0.05,
                                                              "seed": None}}}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for k in ("trainable", "dtype", "embeddings_initializer"):
            config.pop(k, None)
        bis = config.pop("batch_input_shape", None)
        if bis is not None:
            config["input_shape"] = tuple(bis)[1:]
        return cls(**config)

    def _spec(self):
        spec = self._named_spec({"type": "embedding", "input_dim": self.input_dim,
                                 "output_dim": self.output_dim})
        if not self._given_name:
            spec.pop("name")  # the table is "embedding" unless named
        return spec
