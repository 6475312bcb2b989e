"""strata.keras.regularizers: l1 and l2 weight penalties (added to the
loss by the runtime), by Keras's names and classes."""
import numbers

from .utils import _by_name_or_config


class Regularizer:
    _class_name = None

    def get_config(self):
        return dict(self._config)

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _factor(cls, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ValueError("%s: `%s` must be a number >= 0, got %r" % (cls, name, value))
    return float(value)


class L1L2(Regularizer):
    _class_name = "L1L2"

    def __init__(self, l1=0.0, l2=0.0):
        self._config = {"l1": _factor("L1L2", "l1", l1), "l2": _factor("L1L2", "l2", l2)}
        self.l1, self.l2 = self._config["l1"], self._config["l2"]


class L1(Regularizer):
    _class_name = "L1"

    def __init__(self, l1=0.01):
        self.l1 = _factor("L1", "l1", l1)
        self._config = {"l1": self.l1}


class L2(Regularizer):
    _class_name = "L2"

    def __init__(self, l2=0.01):
        self.l2 = _factor("L2", "l2", l2)
        self._config = {"l2": self.l2}


l1, l2, l1_l2 = L1, L2, L1L2
_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": L1L2}
_BY_CLASS = {"L1": L1, "L2": L2, "L1L2": L1L2}


def get(identifier):
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    found = _by_name_or_config(identifier, _BY_NAME, _BY_CLASS)
    if found is not None:
        return found
    raise ValueError("Could not interpret regularizer identifier: %r (expected l1, "
                     "l2, l1_l2 or a keras.regularizers object)" % (identifier,))


def serialize(layer, argument, identifier):
    try:
        reg = get(identifier)
    except ValueError as e:
        raise ValueError("%s: `%s`: %s" % (layer, argument, e)) from None
    if reg is None:
        return None
    return {"class_name": reg._class_name, "config": reg.get_config()}
