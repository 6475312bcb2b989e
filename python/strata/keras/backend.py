"""strata.keras.backend: clear_session (resets the automatic names),
get_value / set_value (an optimizer's learning rate, as older Keras programs
set it)."""
import numpy as np

from .layers import clear_session
from .optimizers import LearningRate


def get_value(x):
    return np.asarray(x).item() if np.ndim(x) == 0 else np.asarray(x)


def set_value(x, value):
    """Sets a learning rate (model.optimizer.lr / .learning_rate)."""
    if not isinstance(x, LearningRate):
        raise ValueError("set_value: strata sets an optimizer's learning rate this "
                         "way (model.optimizer.learning_rate); got %r" % (x,))
    x.assign(value)


__all__ = ["clear_session", "get_value", "set_value"]
