"""strata.data: tf.data's Dataset over numpy arrays.

A Dataset here is a description (arrays, shuffle, batch, repeat, map)
that ``Model.fit`` hands to the C++ runtime whole: examples are batched,
shuffled and iterated in C++, never by a Python step loop. Iterating a
Dataset from Python yields its batches as numpy arrays (for code of one's
own).
"""
import numpy as np

AUTOTUNE = -1


def _features_of(tensors, what):
    """An array, or a dict of arrays (named inputs) with one first dimension."""
    if isinstance(tensors, dict):
        out = {k: np.asarray(v) for k, v in tensors.items()}
        sizes = {k: len(v) for k, v in out.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError("%s: the features' first dimensions differ: %s"
                             % (what, sizes))
        return out
    return np.asarray(tensors)


def _count(x):
    return len(next(iter(x.values()))) if isinstance(x, dict) else len(x)


def _index(x, idx):
    return {k: v[idx] for k, v in x.items()} if isinstance(x, dict) else x[idx]


def _stack(parts):
    if parts and isinstance(parts[0], dict):
        return {k: np.stack([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    return np.stack([np.asarray(p) for p in parts])


def _concat(parts):
    if parts and isinstance(parts[0], dict):
        return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    return np.concatenate([np.asarray(p) for p in parts])


def _as_arrays(tensors):
    if isinstance(tensors, dict):
        return _features_of(tensors, "from_tensor_slices"), None
    if isinstance(tensors, (tuple, list)) and len(tensors) == 2:
        if isinstance(tensors[0], (tuple, list)) and tensors[0] and \
                all(np.ndim(t) >= 1 for t in tensors[0]) and \
                len({len(t) for t in tensors[0]}) == 1 and len(tensors[0]) != \
                len(np.asarray(tensors[1])):
            raise ValueError("from_tensor_slices: features given as a tuple of %d "
                             "arrays; name them instead, as a dict ({'input_a': ..., "
                             "'input_b': ...}) keyed by the model's inputs"
                             % len(tensors[0]))
        x = _features_of(tensors[0], "from_tensor_slices")
        y = np.asarray(tensors[1])
        if _count(x) != len(y):
            raise ValueError(
                "from_tensor_slices: the features have %d elements and the "
                "labels %d; both need the same first dimension" % (_count(x), len(y)))
        return x, y
    if isinstance(tensors, (tuple, list)) and len(tensors) != 2:
        raise ValueError("from_tensor_slices: expected an array, a dict of arrays or "
                         "a (features, labels) pair, got a tuple of %d" % len(tensors))
    return np.asarray(tensors), None


class AutoShardPolicy:
    """tf.data.experimental.AutoShardPolicy."""
    OFF, AUTO, FILE, DATA, HINT = -1, 0, 1, 2, 3


class _DistributeOptions:
    def __init__(self):
        self.auto_shard_policy = AutoShardPolicy.AUTO
        self.num_devices = None


class Options:
    """tf.data.Options: the auto-shard policy (strategies split the
    examples themselves; OFF and DATA are recorded and honoured alike), and
    the threading and optimization fields, accepted."""

    def __init__(self):
        self.experimental_distribute = _DistributeOptions()
        self.experimental_deterministic = True
        self.deterministic = True
        self.experimental_optimization = None
        self.threading = None


class _Experimental:
    AutoShardPolicy = AutoShardPolicy
    AUTOTUNE = AUTOTUNE

    @staticmethod
    def cardinality(dataset):
        return dataset.cardinality()


experimental = _Experimental()
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


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
        if any(np.ndim(v) == 0 for v in (x.values() if isinstance(x, dict) else [x])):
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
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError("batch: `batch_size` must be a positive integer, got %r"
                             % (batch_size,))
        return self._with(_batch=int(batch_size), _drop_remainder=bool(drop_remainder))

    def repeat(self, count=None, name=None):
        if count is None or count < 0:
            return self._with(_repeat=None)
        return self._with(_repeat=None if self._repeat is None else self._repeat * int(count))

    def _per_unit(self, fn, what):
        """fn applied to each element (each batch after batch()), as
        tf.data does, results stacked."""
        n = _count(self._x)
        unit = self._batch or 1
        starts = list(range(0, n, unit))

        def call(idx):
            x = _index(self._x, idx)
            return fn(x) if self._y is None else fn(x, self._y[idx])

        def split(out):
            if self._y is None:
                return out, None
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise ValueError("%s: map_func must return a (features, labels) pair"
                                 % what)
            return out[0], out[1]

        one = (lambda s: s) if unit == 1 else (lambda s: slice(s, min(s + unit, n)))
        outs = [split(call(one(s))) for s in starts]
        join = _stack if unit == 1 else _concat
        x = join([o[0] for o in outs])
        y = None if self._y is None else join([o[1] for o in outs])
        return x, y

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """Applies map_func to each element (each batch after batch()):
        map_func(x, y) -> (x, y) for labelled datasets, map_func(x) -> x
        otherwise; over numpy arrays (tf.cast, tf.reshape, ... work on
        them)."""
        x, y = self._per_unit(map_func, "map")
        if not isinstance(x, dict):
            x = np.asarray(x)
        if y is not None:
            y = np.asarray(y)
        if _count(x) != _count(self._x) or (y is not None and len(y) != _count(x)):
            raise ValueError("map: map_func must keep the number of elements "
                             "(%d)" % _count(self._x))
        d = self._with()
        d._x, d._y = x, y
        return d

    def filter(self, predicate, name=None):
        """The elements for which predicate(x[, y]) is true."""
        if self._batch is not None:
            raise ValueError("filter: filter before batch()")
        n = _count(self._x)
        keep = np.array([bool(predicate(_index(self._x, i)) if self._y is None
                              else predicate(_index(self._x, i), self._y[i]))
                         for i in range(n)], dtype=bool)
        d = self._with()
        d._x = _index(self._x, keep)
        d._y = None if self._y is None else self._y[keep]
        return d

    def shard(self, num_shards, index, name=None):
        """Every num_shards-th element from `index` (tf.data's shard)."""
        num_shards, index = int(num_shards), int(index)
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError("shard: `index` must be in [0, num_shards), got index=%d "
                             "num_shards=%d" % (index, num_shards))
        d = self._with()
        d._x = _index(self._x, slice(index, None, num_shards))
        d._y = None if self._y is None else self._y[index::num_shards]
        return d

    @staticmethod
    def zip(datasets, name=None):
        """Dataset.zip((features, labels)) of two unlabelled datasets."""
        if not isinstance(datasets, (tuple, list)) or len(datasets) != 2 or \
                any(d._y is not None for d in datasets):
            raise ValueError("zip: pass a (features, labels) pair of unlabelled "
                             "datasets")
        x, y = datasets
        n = min(_count(x._x), _count(y._x))
        return Dataset(_index(x._x, slice(0, n)), np.asarray(y._x)[:n])

    @staticmethod
    def from_tensors(tensors, name=None):
        x, y = _as_arrays(tensors)
        x = {k: v[None] for k, v in x.items()} if isinstance(x, dict) else x[None]
        return Dataset(x, None if y is None else y[None])

    @staticmethod
    def range(*args, **kwargs):
        kwargs.pop("name", None)
        dtype = kwargs.pop("output_type", np.int64)
        return Dataset(np.arange(*args).astype(dtype))

    def unbatch(self, name=None):
        if self._batch is not None:
            return self._with(_batch=None, _drop_remainder=False)
        x = self._x
        if isinstance(x, dict):
            x = {k: v.reshape((-1,) + v.shape[2:]) for k, v in x.items()}
        else:
            x = x.reshape((-1,) + x.shape[2:])
        d = self._with()
        d._x = x
        d._y = None if self._y is None else self._y.reshape((-1,) + self._y.shape[2:])
        return d

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None,
                     drop_remainder=False, name=None):
        """The elements are arrays of one shape here, so padded_batch batches."""
        return self.batch(batch_size, drop_remainder=drop_remainder)

    def as_numpy_iterator(self):
        return iter(self)

    def options(self):
        return getattr(self, "_options", None) or Options()

    def with_options(self, options, name=None):
        if not isinstance(options, Options):
            raise TypeError("with_options: expected a tf.data.Options, got %s"
                            % type(options).__name__)
        d = self._with()
        d._options = options
        return d

    def _first_pass_order(self):
        """The order of the examples in the dataset's first pass: its
        shuffle (drawn once per dataset object, so that take and skip of one
        dataset split the same permutation) or the stored order."""
        n = _count(self._x)
        if not self._shuffle:
            return np.arange(n)
        if "_perm" not in self.__dict__:
            self.__dict__["_perm"] = np.random.default_rng(self._seed).permutation(n)
        return self.__dict__["_perm"]

    def _cut(self, start, stop, what):
        """The examples [start, stop) of the dataset's stream (its passes
        one after the other), as a new unrepeated dataset that keeps the
        batch size; the order is fixed (an earlier shuffle drawn once)."""
        n = _count(self._x)
        order = self._first_pass_order()
        passes = self._repeat
        if stop is None:
            if passes is None:
                raise ValueError("%s: the dataset repeats forever" % what)
            stop = n * passes
        if passes is not None:
            stop = min(stop, n * passes)
        start = min(start, stop)
        reps = -(-stop // n) if n else 0
        idx = np.concatenate([order] * max(reps, 1))[start:stop] if n else order[:0]
        d = self._with(_repeat=1, _shuffle=0)
        d._x = _index(self._x, idx)
        d._y = None if self._y is None else self._y[idx]
        d.__dict__.pop("_perm", None)
        return d

    def take(self, count, name=None):
        """The first `count` elements (batches, after batch()), in the
        dataset's order (an earlier shuffle applied once)."""
        count = int(count)
        if count < 0:
            return self
        unit = self._batch or 1
        return self._cut(0, count * unit, "take")

    def skip(self, count, name=None):
        """All but the first `count` elements (batches after batch()); -1
        skips all."""
        count = int(count)
        unit = self._batch or 1
        if count < 0:
            return self._cut(0, 0, "skip")
        if self._repeat is None:
            # An infinite stream stays infinite: one pass, rotated.
            n = _count(self._x)
            order = np.roll(self._first_pass_order(), -((count * unit) % max(n, 1)))
            d = self._with(_shuffle=0)
            d._x = _index(self._x, order)
            d._y = None if self._y is None else self._y[order]
            d.__dict__.pop("_perm", None)
            return d
        return self._cut(count * unit, None, "skip")

    def prefetch(self, buffer_size, name=None):
        return self  # the C++ runtime feeds its own steps

    def cache(self, filename="", name=None):
        return self

    def cardinality(self):
        n = _count(self._x) * (self._repeat if self._repeat is not None else 1)
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
            order = (rng.permutation(_count(self._x)) if self._shuffle
                     else np.arange(_count(self._x)))
            step = self._batch or 1
            for start in range(0, len(order), step):
                idx = order[start:start + step]
                if self._batch and self._drop_remainder and len(idx) < step:
                    break
                if self._batch is None:
                    idx = idx[0]
                if self._y is None:
                    yield _index(self._x, idx)
                else:
                    yield _index(self._x, idx), self._y[idx]
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
