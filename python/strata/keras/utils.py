"""strata.keras.utils: set_random_seed, to_categorical."""
import numpy as np

_SEED = [1]


def set_random_seed(seed):
    """Seeds the initializers and dropout of models compiled afterwards."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError("set_random_seed: `seed` must be a non-negative integer, "
                         "got %r" % (seed,))
    _SEED[0] = seed


def _seed():
    return _SEED[0]


def _by_name_or_config(identifier, by_name, by_class):
    """The object a string name (`by_name`) or a {"class_name", "config"}
    dict (`by_class`, through from_config) names; None for anything else."""
    if isinstance(identifier, str) and identifier in by_name:
        return by_name[identifier]()
    if isinstance(identifier, dict) and identifier.get("class_name") in by_class:
        return by_class[identifier["class_name"]].from_config(
            identifier.get("config") or {})
    return None


def to_categorical(y, num_classes=None, dtype="float32"):
    """Class labels as one-hot rows (keras.utils.to_categorical)."""
    y = np.asarray(y, dtype="int64")
    shape = y.shape
    if shape and shape[-1] == 1 and len(shape) > 1:
        shape = shape[:-1]
    y = y.reshape(-1)
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y.size else 0
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError("to_categorical: labels must be in [0, num_classes=%d), got "
                         "%d..%d" % (num_classes, int(y.min()), int(y.max())))
    out = np.zeros((y.size, num_classes), dtype=dtype)
    out[np.arange(y.size), y] = 1
    return out.reshape(shape + (num_classes,))


class DatasetCreator:
    """tf.keras.utils.experimental.DatasetCreator: `dataset_fn(input_context)`
    builds the dataset where fit needs it (with steps_per_epoch, as Keras
    requires), given a tf.distribute.InputContext."""

    def __init__(self, dataset_fn, input_options=None):
        if not callable(dataset_fn):
            raise TypeError("`dataset_fn` for `DatasetCreator` must be a `callable`.")
        self.dataset_fn = dataset_fn
        self.input_options = input_options

    def __call__(self, *args, **kwargs):
        return self.dataset_fn(*args, **kwargs)


class experimental:  # noqa: N801 - tf.keras.utils.experimental
    DatasetCreator = DatasetCreator
