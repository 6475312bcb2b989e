"""The tensor functions of TensorFlow that input pipelines (Dataset.map
functions) and callbacks use, over numpy arrays: ``tf.cast``, the dtypes,
``tf.reshape``, ``tf.one_hot``, ``tf.math``, ``tf.random``, ...

A tensor here is a numpy array (``.numpy()`` is not needed: the values are
the arrays). The model's own computation never runs here: it is the C++
runtime's.
"""
import numbers

import numpy as np


class DType:
    """A dtype with TensorFlow's name (``tf.float32.name == "float32"``)."""

    def __init__(self, name):
        self.name = name
        self.as_numpy_dtype = np.dtype(name).type

    @property
    def is_floating(self):
        return np.issubdtype(np.dtype(self.name), np.floating)

    @property
    def is_integer(self):
        return np.issubdtype(np.dtype(self.name), np.integer)

    @property
    def min(self):
        d = np.dtype(self.name)
        return np.finfo(d).min if self.is_floating else np.iinfo(d).min

    @property
    def max(self):
        d = np.dtype(self.name)
        return np.finfo(d).max if self.is_floating else np.iinfo(d).max

    def __eq__(self, other):
        try:
            return np.dtype(self.name) == _np_dtype(other)
        except TypeError:
            return False

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return "tf.%s" % self.name


float16, float32, float64 = DType("float16"), DType("float32"), DType("float64")
int8, int16, int32, int64 = DType("int8"), DType("int16"), DType("int32"), DType("int64")
uint8, uint16 = DType("uint8"), DType("uint16")
bool_ = DType("bool")
half, double = float16, float64
_DTYPES = {d.name: d for d in (float16, float32, float64, int8, int16, int32, int64,
                               uint8, uint16, bool_)}


def as_dtype(value):
    return _DTYPES[np.dtype(_np_dtype(value)).name]


def _np_dtype(dtype):
    if isinstance(dtype, DType):
        return np.dtype(dtype.name)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError("Cannot convert %r to a dtype (tf.float32, tf.int32, ... or "
                        "a numpy dtype)" % (dtype,)) from None


def convert_to_tensor(value, dtype=None, name=None):
    a = np.asarray(value)
    if dtype is not None:
        a = a.astype(_np_dtype(dtype), copy=False)
    elif a.dtype == np.float64 and not isinstance(value, np.ndarray):
        a = a.astype(np.float32)  # Python floats are float32 tensors in TF
    return a


def constant(value, dtype=None, shape=None, name="Const"):
    a = convert_to_tensor(value, dtype)
    if shape is not None:
        a = np.broadcast_to(a, tuple(shape)).copy() if a.size == 1 \
            else a.reshape(tuple(shape))
    return a


def cast(x, dtype, name=None):
    return np.asarray(x).astype(_np_dtype(dtype))


def reshape(tensor, shape, name=None):
    return np.reshape(np.asarray(tensor), tuple(int(d) for d in np.asarray(shape).ravel()))


def expand_dims(input, axis, name=None):
    return np.expand_dims(np.asarray(input), int(axis))


def squeeze(input, axis=None, name=None):
    if isinstance(axis, list):
        axis = tuple(axis)
    return np.squeeze(np.asarray(input), axis=axis)


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None,
            name=None):
    idx = np.asarray(indices).astype(np.int64)
    if isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or depth < 1:
        raise ValueError("one_hot: `depth` must be a positive integer, got %r" % (depth,))
    dt = _np_dtype(dtype) if dtype is not None else np.float32
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    out = np.where(idx[..., None] == np.arange(depth), on, off).astype(dt)
    if axis is not None and axis != -1:
        out = np.moveaxis(out, -1, axis)
    return out


def shape(input, out_type=None, name=None):
    return np.asarray(np.shape(input), dtype=np.int32)


def rank(input, name=None):
    return np.int32(np.ndim(input))


def size(input, out_type=None, name=None):
    return np.int32(np.size(input))


def zeros(shape, dtype=float32, name=None):
    return np.zeros(tuple(shape), _np_dtype(dtype))


def ones(shape, dtype=float32, name=None):
    return np.ones(tuple(shape), _np_dtype(dtype))


def zeros_like(input, dtype=None, name=None):
    return np.zeros_like(np.asarray(input), dtype=None if dtype is None else _np_dtype(dtype))


def ones_like(input, dtype=None, name=None):
    return np.ones_like(np.asarray(input), dtype=None if dtype is None else _np_dtype(dtype))


def fill(dims, value, name=None):
    return np.full(tuple(dims), value)


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001
    if limit is None:
        start, limit = 0, start
    out = np.arange(start, limit, delta)
    return out if dtype is None else out.astype(_np_dtype(dtype))


def concat(values, axis, name="concat"):
    return np.concatenate([np.asarray(v) for v in values], axis=axis)


def stack(values, axis=0, name="stack"):
    return np.stack([np.asarray(v) for v in values], axis=axis)


def transpose(a, perm=None, conjugate=False, name="transpose"):
    return np.transpose(np.asarray(a), perm)


def where(condition, x=None, y=None, name=None):
    if x is None and y is None:
        return np.argwhere(np.asarray(condition))
    return np.where(condition, x, y)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    return np.clip(np.asarray(t), clip_value_min, clip_value_max)


def identity(input, name=None):
    return np.asarray(input)


def _reduce(fn):
    def reduce(input_tensor, axis=None, keepdims=False, name=None):
        if isinstance(axis, list):
            axis = tuple(axis)
        return fn(np.asarray(input_tensor), axis=axis, keepdims=keepdims)
    return reduce


class _Math:
    """tf.math: elementwise functions and reductions over numpy."""

    abs = staticmethod(np.abs)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    sqrt = staticmethod(np.sqrt)
    square = staticmethod(np.square)
    pow = staticmethod(np.power)
    sign = staticmethod(np.sign)
    floor = staticmethod(np.floor)
    ceil = staticmethod(np.ceil)
    round = staticmethod(np.round)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    add = staticmethod(np.add)
    subtract = staticmethod(np.subtract)
    multiply = staticmethod(np.multiply)
    divide = staticmethod(np.divide)
    truediv = staticmethod(np.true_divide)
    floordiv = staticmethod(np.floor_divide)
    mod = staticmethod(np.mod)
    negative = staticmethod(np.negative)
    equal = staticmethod(np.equal)
    not_equal = staticmethod(np.not_equal)
    greater = staticmethod(np.greater)
    greater_equal = staticmethod(np.greater_equal)
    less = staticmethod(np.less)
    less_equal = staticmethod(np.less_equal)
    logical_and = staticmethod(np.logical_and)
    logical_or = staticmethod(np.logical_or)
    logical_not = staticmethod(np.logical_not)
    is_nan = staticmethod(np.isnan)
    is_finite = staticmethod(np.isfinite)
    tanh = staticmethod(np.tanh)
    reduce_sum = staticmethod(_reduce(np.sum))
    reduce_mean = staticmethod(_reduce(np.mean))
    reduce_max = staticmethod(_reduce(np.max))
    reduce_min = staticmethod(_reduce(np.min))
    reduce_prod = staticmethod(_reduce(np.prod))
    reduce_any = staticmethod(_reduce(np.any))
    reduce_all = staticmethod(_reduce(np.all))

    @staticmethod
    def argmax(input, axis=None, output_type=int64, name=None):
        return np.argmax(np.asarray(input), axis=0 if axis is None else axis).astype(
            _np_dtype(output_type))

    @staticmethod
    def argmin(input, axis=None, output_type=int64, name=None):
        return np.argmin(np.asarray(input), axis=0 if axis is None else axis).astype(
            _np_dtype(output_type))

    @staticmethod
    def sigmoid(x, name=None):
        return 1.0 / (1.0 + np.exp(-np.asarray(x)))

    @staticmethod
    def softmax(logits, axis=-1, name=None):
        z = np.asarray(logits) - np.max(logits, axis=axis, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=axis, keepdims=True)

    @staticmethod
    def top_k(input, k=1, sorted=True, name=None):
        a = np.asarray(input)
        idx = np.argsort(-a, axis=-1, kind="stable")[..., :k]
        return np.take_along_axis(a, idx, axis=-1), idx.astype(np.int32)


math = _Math()
for _name in ("abs", "exp", "log", "sqrt", "square", "maximum", "minimum", "add",
              "subtract", "multiply", "divide", "equal", "not_equal", "greater",
              "less", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
              "reduce_prod", "reduce_any", "reduce_all", "argmax", "argmin",
              "sigmoid", "tanh", "pow", "sign", "round", "floor", "logical_and",
              "logical_or", "logical_not", "negative"):
    globals()[_name] = getattr(math, _name)


class _Random:
    """tf.random over numpy: a global seed (set_seed) and per-call seeds."""

    def __init__(self):
        self._rng = np.random.default_rng()

    def set_seed(self, seed):
        self._rng = np.random.default_rng(seed)

    def _gen(self, seed):
        return self._rng if seed is None else np.random.default_rng(seed)

    def uniform(self, shape, minval=0, maxval=None, dtype=float32, seed=None, name=None):
        dt = _np_dtype(dtype)
        if np.issubdtype(dt, np.integer):
            if maxval is None:
                raise ValueError("random.uniform: `maxval` is required for an integer "
                                 "dtype")
            return self._gen(seed).integers(minval, maxval, size=tuple(shape)).astype(dt)
        hi = 1.0 if maxval is None else maxval
        return self._gen(seed).uniform(minval, hi, size=tuple(shape)).astype(dt)

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=float32, seed=None, name=None):
        return self._gen(seed).normal(mean, stddev, size=tuple(shape)).astype(
            _np_dtype(dtype))

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=float32, seed=None,
                         name=None):
        g = self._gen(seed)
        out = g.normal(0.0, 1.0, size=tuple(shape))
        bad = np.abs(out) > 2
        while bad.any():
            out[bad] = g.normal(0.0, 1.0, size=int(bad.sum()))
            bad = np.abs(out) > 2
        return (mean + stddev * out).astype(_np_dtype(dtype))

    def shuffle(self, value, seed=None, name=None):
        a = np.array(value, copy=True)
        self._gen(seed).shuffle(a)
        return a


random = _Random()


def function(func=None, **kwargs):
    """@tf.function: accepted, and the function runs as written (the model's
    steps run in C++ either way)."""
    if func is None:
        return lambda f: f
    return func
