"""strata.data: tf.data's Dataset over numpy arrays.

A Dataset here is a description (arrays, shuffle, batch, repeat, map)
that ``Model.fit`` hands to the C++ runtime whole: examples are batched,
shuffled and iterated in C++, never by a Python step loop. Iterating a
Dataset from Python yields its batches as numpy arrays (for code of one's
own).
"""
import numpy as np

AUTOTUNE = -1


def _as_arrays(tensors):
    if isinstance(tensors, dict):
        raise TypeError("from_tensor_slices: dict elements are not supported; "
                        "pass an array or a (features, labels) tuple")
    if isinstance(tensors, (tuple, list)) and len(tensors) == 2:
        x, y = (np.asarray(t) for t in tensors)
        if len(x) != len(y):
            raise ValueError(
                "from_tensor_slices: the features have %d elements and the "
                "labels %d; both need the same first dimension" % (len(x), len(y)))
        return x, y
    if isinstance(tensors, (tuple, list)) and len(tensors) != 2:
        raise ValueError("from_tensor_slices: expected an array or a "
                         "(features, labels) pair, got a tuple of %d" % len(tensors))
    return np.asarray(tensors), None


class Dataset:
    """Examples (features, and labels for training) with the pipeline
    applied to them: shuffle, batch, repeat, map, take."""

    def __init__(self, x, y=None, *, _shuffle=0, _seed=None, _batch=None,
                 _drop_remainder=False, _repeat=1):
        self._x = x
        self._y = y
        self._shuffle = _shuffle
        self._seed = _seed
        self._batch = _batch
        self._drop_remainder = _drop_remainder
        self._repeat = _repeat

    def _with(self, **changes):
        d = Dataset.__new__(Dataset)
        d.__dict__.update(self.__dict__)
        d.__dict__.update(changes)
        return d

    @staticmethod
    def from_tensor_slices(tensors, name=None):
        x, y = _as_arrays(tensors)
        if x.ndim == 0:
            raise ValueError("from_tensor_slices: a scalar has no elements to slice")
        return Dataset(x, y)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None,
                name=None):
        if int(buffer_size) < 1 and buffer_size != AUTOTUNE:
            raise ValueError("shuffle: buffer_size must be >= 1, got %r" % (buffer_size,))
        return self._with(_shuffle=int(buffer_size), _seed=seed)

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None,
              deterministic=None, name=None):
        if self._batch is not None:
            raise ValueError("batch: this dataset is batched already "
                             "(nested batches are not supported)")
        if int(batch_size) < 1:
            raise ValueError("batch: batch_size must be >= 1, got %r" % (batch_size,))
        return self._with(_batch=int(batch_size), _drop_remainder=bool(drop_remainder))

    def repeat(self, count=None, name=None):
        if count is None or count < 0:
            return self._with(_repeat=None)
        return self._with(_repeat=None if self._repeat is None else self._repeat * int(count))

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """Applies map_func to the whole arrays at once (vectorized over the
        examples): map_func(x, y) -> (x, y) for labelled datasets,
        map_func(x) -> x otherwise."""
        if self._y is None:
            x = np.asarray(map_func(self._x))
            y = None
        else:
            out = map_func(self._x, self._y)
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise ValueError("map: map_func must return a (features, labels) pair")
            x, y = (np.asarray(t) for t in out)
        if len(x) != len(self._x) or (y is not None and len(y) != len(x)):
            raise ValueError("map: map_func must keep the number of elements "
                             "(%d)" % len(self._x))
        d = self._with()
        d._x, d._y = x, y
        return d

    def take(self, count, name=None):
        count = int(count)
        if count < 0:
            return self
        d = self._with()
        d._x = self._x[:count]
        d._y = None if self._y is None else self._y[:count]
        return d

    def prefetch(self, buffer_size, name=None):
        return self  # the C++ runtime feeds its own steps

    def cache(self, filename="", name=None):
        return self

    def cardinality(self):
        n = len(self._x) * (self._repeat if self._repeat is not None else 1)
        if self._repeat is None:
            return -1  # INFINITE_CARDINALITY
        if self._batch is None:
            return n
        return n // self._batch if self._drop_remainder else -(-n // self._batch)

    def __len__(self):
        c = self.cardinality()
        if c < 0:
            raise TypeError("The dataset is infinite.")
        return c

    def __iter__(self):
        repeat = self._repeat
        rng = np.random.default_rng(self._seed)
        epoch = 0
        while repeat is None or epoch < repeat:
            order = (rng.permutation(len(self._x)) if self._shuffle
                     else np.arange(len(self._x)))
            step = self._batch or 1
            for start in range(0, len(order), step):
                idx = order[start:start + step]
                if self._batch and self._drop_remainder and len(idx) < step:
                    break
                if self._batch is None:
                    idx = idx[0]
                if self._y is None:
                    yield self._x[idx]
                else:
                    yield self._x[idx], self._y[idx]
            epoch += 1

    # --- what fit reads -------------------------------------------------
    @property
    def features(self):
        return self._x

    @property
    def labels(self):
        return self._y

    @property
    def batch_size(self):
        return self._batch

    @property
    def shuffled(self):
        return self._shuffle != 0

    @property
    def repeat_count(self):
        return self._repeat
