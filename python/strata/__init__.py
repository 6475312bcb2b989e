"""Strata from Python: tf.keras- and tf.distribute-shaped training.

    import strata as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([...])
    model.compile(...); model.fit(dataset, epochs=10)

The C++ SDK (sdk/strata.h) does the work: ``fit`` never runs a Python
step loop. The tensor functions (``tf.cast``, ``tf.reshape``, ``tf.math``,
``tf.random``, ...) work on numpy arrays, for input pipelines and callbacks.
"""
from . import errors
from . import ops as _ops
from . import data
from . import distribute
from . import keras
from .ps_client import PsClient
from . import train
from .tape import GradientTape, Variable, add_n, nn
from .ops import (DType, as_dtype, cast, clip_by_value, concat, constant,
                  convert_to_tensor, expand_dims, fill, function, identity, math,
                  one_hot, ones, ones_like, random, rank, reshape, shape, size,
                  squeeze, stack, transpose, where, zeros, zeros_like,
                  float16, float32, float64, int8, int16, int32, int64, uint8, uint16,
                  half, double, abs, exp, log, sqrt, square, maximum, minimum, add,
                  subtract, multiply, divide, equal, not_equal, greater, less,
                  reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod,
                  reduce_any, reduce_all, argmax, argmin, sigmoid, tanh, pow, sign,
                  round, floor, logical_and, logical_or, logical_not, negative)
from .ops import range  # noqa: A004 - tf.range
bool = _ops.bool_  # noqa: A001 - tf.bool

__version__ = "0.5.0"

__all__ = ["errors", "data", "distribute", "keras", "PsClient", "math", "random",
           "cast", "reshape", "expand_dims", "squeeze", "one_hot", "constant",
           "convert_to_tensor", "function", "float32", "int32", "int64", "uint8"]
