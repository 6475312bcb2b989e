"""strata.keras.initializers: the initializers the runtime fills weights
with (kernels/initializers.h), by Keras's names and classes."""
import numbers

from .utils import _by_name_or_config


class Initializer:
    """An initializer and its Keras config."""

    _class_name = None
    _params = ()

    def __init__(self, **config):
        self._config = config

    def get_config(self):
        return dict(self._config)

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __call__(self, shape, dtype=None):
        raise NotImplementedError(
            "%s: the runtime fills the weights (at compile); an initializer is not "
            "called from Python" % type(self).__name__)


def _make(class_name, params):
    def __init__(self, *args, **kwargs):
        config = dict(params)
        for (name, _), value in zip(params, args):
            config[name] = value
        for name, value in kwargs.items():
            if name not in config:
                raise TypeError("%s: unexpected keyword argument %r" % (class_name, name))
            config[name] = value
        for name, value in config.items():
            if name == "seed":
                if value is not None and (isinstance(value, bool) or
                                          not isinstance(value, numbers.Integral) or
                                          value < 0):
                    raise ValueError("%s: `seed` must be a non-negative integer or "
                                     "None, got %r" % (class_name, value))
            elif isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError("%s: `%s` must be a number, got %r"
                                 % (class_name, name, value))
        Initializer.__init__(self, **config)
    return type(class_name, (Initializer,), {"__init__": __init__,
                                             "_class_name": class_name})


Zeros = _make("Zeros", [])
Ones = _make("Ones", [])
Constant = _make("Constant", [("value", 0.0)])
RandomUniform = _make("RandomUniform", [("minval", -0.05), ("maxval", 0.05), ("seed", None)])
RandomNormal = _make("RandomNormal", [("mean", 0.0), ("stddev", 0.05), ("seed", None)])
TruncatedNormal = _make("TruncatedNormal", [("mean", 0.0), ("stddev", 0.05), ("seed", None)])
GlorotUniform = _make("GlorotUniform", [("seed", None)])
GlorotNormal = _make("GlorotNormal", [("seed", None)])
HeNormal = _make("HeNormal", [("seed", None)])
HeUniform = _make("HeUniform", [("seed", None)])

_BY_NAME = {"zeros": Zeros, "ones": Ones, "constant": Constant,
            "uniform": RandomUniform, "random_uniform": RandomUniform,
            "normal": RandomNormal, "random_normal": RandomNormal,
            "truncated_normal": TruncatedNormal, "glorot_uniform": GlorotUniform,
            "glorot_normal": GlorotNormal, "he_normal": HeNormal,
            "he_uniform": HeUniform}
_BY_CLASS = {cls._class_name: cls for cls in set(_BY_NAME.values())}

zeros, ones, constant = Zeros, Ones, Constant
glorot_uniform, glorot_normal, he_normal, he_uniform = (GlorotUniform, GlorotNormal,
                                                        HeNormal, HeUniform)


def get(identifier):
    if isinstance(identifier, Initializer):
        return identifier
    found = _by_name_or_config(identifier, _BY_NAME, _BY_CLASS)
    if found is not None:
        return found
    if isinstance(identifier, type) and issubclass(identifier, Initializer):
        return identifier()
    raise ValueError("Could not interpret initializer identifier: %r (expected one "
                     "of %s)" % (identifier, ", ".join(sorted(_BY_NAME))))


def serialize(layer, argument, identifier):
    """The Keras config ({"class_name", "config"}) of a layer's initializer
    argument; ValueError naming the layer and the argument otherwise."""
    try:
        init = get(identifier)
    except ValueError as e:
        raise ValueError("%s: `%s`: %s" % (layer, argument, e)) from None
    return {"class_name": init._class_name, "config": init.get_config()}
