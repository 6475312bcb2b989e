"""strata.keras.layers (layers_args): the argument checks Keras's layers
share (names, shapes, activations, initializers, regularizers, data
format), each naming the layer and the argument. strata.keras.layers
re-exports every name here."""
import numbers
import re

from . import initializers as _initializers
from . import regularizers as _regularizers

_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu",
                "swish", "elu", "leaky_relu", "selu", "softplus", "relu6",
                "hard_sigmoid", "exponential")
# What the short-list path (the GPU MLP, the embedding front end) computes.
_SHORT_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax")

_REQUIRED = object()

# Keras's automatic names: "dense", "dense_1", ... per class name.
_NAME_COUNTS = {}


def _snake(class_name):
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", class_name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def _unique_name(base):
    n = _NAME_COUNTS.get(base, 0)
    _NAME_COUNTS[base] = n + 1
    return base if n == 0 else "%s_%d" % (base, n)


def clear_session():
    """Resets the automatic layer and model names (keras.backend.clear_session)."""
    _NAME_COUNTS.clear()


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


def _tuple(layer, name, value, n):
    """Keras's normalize_tuple: an int, or n ints, as a list of n ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return [int(value)] * n
    try:
        values = [int(v) for v in value]
    except (TypeError, ValueError):
        raise ValueError("%s: The `%s` argument must be a tuple of %d integers. "
                         "Received: %r" % (layer, name, n, value)) from None
    if len(values) != n:
        raise ValueError("%s: The `%s` argument must be a tuple of %d integers. "
                         "Received: %r" % (layer, name, n, value))
    return values


def _activation(layer, value):
    if value is None:
        return "linear"
    if callable(value):
        value = getattr(value, "__name__", repr(value))
    if value not in _ACTIVATIONS:
        raise ValueError("%s: Unknown activation function: %r; expected one of %s"
                         % (layer, value, ", ".join(_ACTIVATIONS)))
    return value


def _choice(layer, name, value, allowed):
    if value not in allowed:
        raise ValueError("%s: Invalid value for argument `%s`: %r (expected one of %s)"
                         % (layer, name, value, ", ".join(repr(a) for a in allowed)))
    return value


def _check_initializers(layer, config, *names):
    for n in names:
        if n in config:
            config[n] = _initializers.serialize(layer, n, config[n])


def _check_regularizers(layer, config, *names):
    for n in names:
        if n in config:
            config[n] = _regularizers.serialize(layer, n, config[n])


def _check_constraints(layer, config, *names):
    for n in names:
        if config.get(n) is not None:
            raise ValueError("%s: `%s` is not supported" % (layer, n))


def _check_channels_last(layer, c):
    if c.get("data_format") not in (None, "channels_last"):
        raise ValueError("%s: `data_format` %r is not supported (only 'channels_last')"
                         % (layer, c["data_format"]))
    if "data_format" in c:
        c["data_format"] = "channels_last"
