"""strata.keras.models (models_data): a model's data: the checks that turn
x / y (arrays, or a Dataset) into the runtime's float32 features, int32
labels or int64 ids, and the native datasets fit / evaluate / train_on_batch
read. strata.keras.models re-exports _features, _labels, _ids and
_positive."""
import numbers

import numpy as np

from .. import _strata
from .. import data as _data
from .. import distribute as _distribute
from .. import errors as _errors
from . import utils as _utils


def _features(x, what):
    """x as float32 rows (examples, features), C order."""
    if isinstance(x, _data.Dataset):
        raise TypeError("%s: pass the dataset as `x` alone" % what)
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise TypeError("%s: `x` must hold numbers, got dtype %s" % (what, a.dtype))
    if a.ndim == 0:
        raise ValueError("%s: `x` must have a batch dimension, got a scalar" % what)
    a = a.reshape(len(a), -1) if a.ndim != 2 else a
    if not np.all(np.isfinite(a)):
        raise ValueError("%s: `x` holds NaN or infinite values" % what)
    return np.ascontiguousarray(a, dtype=np.float32)


def _labels(y, what, n):
    if y is None:
        raise ValueError("%s: labels `y` are required" % what)
    a = np.asarray(y)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a.reshape(-1)
    if a.ndim == 2:
        a = a.argmax(axis=1)  # one-hot labels
    if a.ndim != 1:
        raise ValueError("%s: `y` must be 1-D (one label per example), got shape %s"
                         % (what, a.shape))
    if len(a) != n:
        raise ValueError("%s: Data cardinality is ambiguous: x sizes: %d, y sizes: %d. "
                         "Make sure all arrays contain the same number of samples."
                         % (what, n, len(a)))
    if not np.issubdtype(a.dtype, np.integer):
        if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a)) \
                or np.any(a != np.round(a)):
            raise ValueError("%s: `y` must hold integer class labels" % what)
    if len(a) and a.min() < 0:
        raise ValueError("%s: `y` holds a negative label (%d)" % (what, int(a.min())))
    return np.ascontiguousarray(a, dtype=np.int32)


def _ids(x, what, embedding):
    """x as int64 rows of ids (examples, input_length), C order, each id in
    [0, input_dim) as Keras's Embedding requires."""
    if isinstance(x, _data.Dataset):
        raise TypeError("%s: pass the dataset as `x` alone" % what)
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise TypeError("%s: `x` must hold integer ids, got dtype %s" % (what, a.dtype))
    if a.ndim == 1 and embedding["length"] == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2 or a.shape[1] != embedding["length"]:
        raise ValueError("%s: `x` must have shape (examples, %d) (the Embedding's "
                         "input_length), got %s" % (what, embedding["length"], a.shape))
    if not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise ValueError("%s: `x` must hold integer ids" % what)
    a = np.ascontiguousarray(a, dtype=np.int64)
    bad = (a < 0) | (a >= embedding["input_dim"])
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise _errors.InvalidArgumentError(
            "%s: indices[%d,%d] = %d is not in [0, %d)"
            % (what, i, j, int(a[i, j]), embedding["input_dim"]))
    return a


def _positive(what, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError("%s: `%s` must be a positive integer, got %r" % (what, name, value))
    return int(value)


class _DataMixin:
    """keras.Model's data: x / y as the native datasets the runtime reads."""

    # --- data ------------------------------------------------------------
    def _steps_datasets(self, feats, labels, shuffled, what, batch, steps, epochs):
        """steps_per_epoch: `epochs` native datasets of steps * batch examples
        each, read on through the data (a new pass, reshuffled when the
        dataset shuffles, when one ends), as Keras reads a repeated dataset."""
        n = len(feats)
        per_epoch = steps * batch
        total = per_epoch * epochs
        rng = np.random.default_rng(_utils._seed() + 7)
        passes = -(-total // n)
        order = np.concatenate([rng.permutation(n) if shuffled else np.arange(n)
                                for _ in range(passes)])[:total]
        return [self._native_dataset(feats[order[i:i + per_epoch]],
                                     labels[order[i:i + per_epoch]], shuffled, what)
                for i in range(0, total, per_epoch)]

    def _dataset(self, x, y, what, batch_size=None, shuffle=True, steps=None,
                 epochs=1):
        """(native dataset, batch size from the dataset or None, shuffled,
        examples); with `steps` (steps_per_epoch) a list of `epochs` native
        datasets of steps batches each."""
        if isinstance(x, _distribute.DistributedDataset):
            x = x._global_dataset()
        if isinstance(x, _data.Dataset):
            if y is not None:
                raise ValueError("%s: `y` argument is not supported when using "
                                 "dataset as input." % what)
            if x.labels is None:
                raise ValueError("%s: the dataset holds no labels" % what)
            if x.repeat_count is None and steps is None:
                raise ValueError("%s: the dataset repeats forever: pass "
                                 "steps_per_epoch (or drop .repeat())" % what)
            features = self._join_inputs(x.features, what) \
                if isinstance(x.features, dict) else x.features
            if self._embedding is not None:
                feats = _ids(features, what, self._embedding)
            else:
                feats = _features(features, what)
            labels = _labels(x.labels, what, len(feats))
            self._last_arrays = (feats, labels)
            if steps is not None:
                batch = batch_size or x.batch_size or 32
                return (self._steps_datasets(feats, labels, x.shuffled, what, batch,
                                             steps, epochs),
                        x.batch_size, x.shuffled, steps * batch)
            if x.repeat_count > 1:
                feats = np.concatenate([feats] * x.repeat_count)
                labels = np.concatenate([labels] * x.repeat_count)
            return (self._native_dataset(feats, labels, x.shuffled, what), x.batch_size,
                    x.shuffled, len(feats))
        if isinstance(x, tuple) and y is None and len(x) == 2:
            x, y = x
        if not what.startswith("fit"):  # fit joined its inputs already
            x = self._join_inputs(x, what)
        if self._embedding is not None:
            feats = _ids(x, what, self._embedding)
        else:
            feats = _features(x, what)
        labels = _labels(y, what, len(feats))
        self._last_arrays = (feats, labels)
        if steps is not None:
            batch = batch_size or 32
            return (self._steps_datasets(feats, labels, shuffle, what, batch, steps,
                                         epochs),
                    batch_size, shuffle, steps * batch)
        return (self._native_dataset(feats, labels, shuffle and what == "fit", what),
                batch_size, True, len(feats))

    def _native_dataset(self, feats, labels, shuffle, what):
        if self._embedding is None:
            return _strata.dataset_from_arrays(feats, labels)
        if len(labels) and labels.max() > 1:
            raise ValueError("%s: a model with an Embedding predicts one probability "
                             "(sigmoid, binary_crossentropy): labels must be 0 or 1, "
                             "got %d" % (what, int(labels.max())))
        if shuffle:
            # The ids are streamed from a file in its order each epoch: they are
            # shuffled once, here, with the model's seed.
            order = np.random.default_rng(_utils._seed()).permutation(len(labels))
            feats, labels = feats[order], labels[order]
        return _strata.dataset_from_ids(feats, labels, self._embedding["bag"])
