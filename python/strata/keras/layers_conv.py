"""strata.keras.layers (layers_conv): the convolution and pooling layers
(Conv1D / Conv2D, Max- and AveragePooling, their global forms), channels
last. strata.keras.layers re-exports every name here."""
from .layers_args import (_REQUIRED, _activation, _check_channels_last,
                          _check_constraints, _check_initializers,
                          _check_regularizers, _choice, _positive_int, _tuple)
from .layers_base import _make_layer


def _conv_check(rank):
    def check(layer, c):
        c["filters"] = _positive_int(layer, "filters", c["filters"])
        c["kernel_size"] = _tuple(layer, "kernel_size", c["kernel_size"], rank)
        c["strides"] = _tuple(layer, "strides", c["strides"], rank)
        c["dilation_rate"] = _tuple(layer, "dilation_rate", c["dilation_rate"], rank)
        c["padding"] = _choice(layer, "padding", c["padding"], ("valid", "same"))
        _check_channels_last(layer, c)
        c["activation"] = _activation(layer, c["activation"])
        c["use_bias"] = bool(c["use_bias"])
        if c["groups"] != 1:
            raise ValueError("%s: `groups` %r is not supported (only 1)"
                             % (layer, c["groups"]))
        _check_initializers(layer, c, "kernel_initializer", "bias_initializer")
        _check_regularizers(layer, c, "kernel_regularizer", "bias_regularizer")
        _check_constraints(layer, c, "kernel_constraint", "bias_constraint")
        if c.pop("activity_regularizer", None) is not None:
            raise ValueError("%s: `activity_regularizer` is not supported" % layer)
    return check


def _conv_args(rank):
    return [("filters", _REQUIRED), ("kernel_size", _REQUIRED),
            ("strides", (1,) * rank), ("padding", "valid"), ("data_format", None),
            ("dilation_rate", (1,) * rank), ("groups", 1), ("activation", None),
            ("use_bias", True), ("kernel_initializer", "glorot_uniform"),
            ("bias_initializer", "zeros"), ("kernel_regularizer", None),
            ("bias_regularizer", None), ("activity_regularizer", None),
            ("kernel_constraint", None), ("bias_constraint", None)]


Conv1D = _make_layer("Conv1D", _conv_args(1), _conv_check(1),
                     "keras.layers.Conv1D: kernel [k, in, filters], channels last.")
Conv2D = _make_layer("Conv2D", _conv_args(2), _conv_check(2),
                     "keras.layers.Conv2D: kernel [kh, kw, in, filters], channels last.")
Convolution1D = Conv1D
Convolution2D = Conv2D


def _pool_check(rank):
    def check(layer, c):
        c["pool_size"] = _tuple(layer, "pool_size", c["pool_size"], rank)
        c["strides"] = (list(c["pool_size"]) if c["strides"] is None
                        else _tuple(layer, "strides", c["strides"], rank))
        c["padding"] = _choice(layer, "padding", c["padding"], ("valid", "same"))
        _check_channels_last(layer, c)
    return check


MaxPooling1D = _make_layer("MaxPooling1D", [("pool_size", 2), ("strides", None),
                                            ("padding", "valid"),
                                            ("data_format", "channels_last")],
                           _pool_check(1))
AveragePooling1D = _make_layer("AveragePooling1D", [("pool_size", 2), ("strides", None),
                                                    ("padding", "valid"),
                                                    ("data_format", "channels_last")],
                               _pool_check(1))
MaxPooling2D = _make_layer("MaxPooling2D", [("pool_size", (2, 2)), ("strides", None),
                                            ("padding", "valid"), ("data_format", None)],
                           _pool_check(2))
AveragePooling2D = _make_layer("AveragePooling2D", [("pool_size", (2, 2)),
                                                    ("strides", None),
                                                    ("padding", "valid"),
                                                    ("data_format", None)],
                               _pool_check(2))
MaxPool1D, MaxPool2D = MaxPooling1D, MaxPooling2D
AvgPool1D, AvgPool2D = AveragePooling1D, AveragePooling2D


def _global_check(layer, c):
    _check_channels_last(layer, c)
    c["keepdims"] = bool(c["keepdims"])


_GlobalAveragePooling1DBase = _make_layer(
    "GlobalAveragePooling1D", [("data_format", "channels_last"), ("keepdims", False)],
    _global_check)


class GlobalAveragePooling1D(_GlobalAveragePooling1DBase):
    """keras.layers.GlobalAveragePooling1D: the mean over the steps axis.
    Right after a Sequential model's first layer, an Embedding, it is the
    embedding front end's mean of rows."""

    def _spec(self):
        if self._config["keepdims"]:
            return None
        return self._named_spec({"type": "global_average_pooling1d"})


GlobalAveragePooling2D = _make_layer(
    "GlobalAveragePooling2D", [("data_format", None), ("keepdims", False)], _global_check)
GlobalMaxPooling1D = _make_layer(
    "GlobalMaxPooling1D", [("data_format", "channels_last"), ("keepdims", False)],
    _global_check)
GlobalMaxPooling2D = _make_layer(
    "GlobalMaxPooling2D", [("data_format", None), ("keepdims", False)], _global_check)
GlobalAvgPool1D, GlobalAvgPool2D = GlobalAveragePooling1D, GlobalAveragePooling2D
GlobalMaxPool1D, GlobalMaxPool2D = GlobalMaxPooling1D, GlobalMaxPooling2D
