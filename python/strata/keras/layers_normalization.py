"""strata.keras.layers (layers_normalization): BatchNormalization and
LayerNormalization. strata.keras.layers re-exports every name here."""
import numbers

from .layers_args import _check_constraints, _check_initializers, _check_regularizers
from .layers_base import _make_layer


def _check_norm(layer, c):
    for arg in ("epsilon",) + (("momentum",) if "momentum" in c else ()):
        v = c[arg]
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ValueError("%s: `%s` must be a number, got %r" % (layer, arg, v))
        c[arg] = float(v)
    c["center"] = bool(c["center"])
    c["scale"] = bool(c["scale"])
    _check_initializers(layer, c, "beta_initializer", "gamma_initializer",
                        "moving_mean_initializer", "moving_variance_initializer")
    _check_regularizers(layer, c, "beta_regularizer", "gamma_regularizer")
    _check_constraints(layer, c, "beta_constraint", "gamma_constraint")


BatchNormalization = _make_layer(
    "BatchNormalization",
    [("axis", -1), ("momentum", 0.99), ("epsilon", 0.001), ("center", True),
     ("scale", True), ("beta_initializer", "zeros"), ("gamma_initializer", "ones"),
     ("moving_mean_initializer", "zeros"), ("moving_variance_initializer", "ones"),
     ("beta_regularizer", None), ("gamma_regularizer", None),
     ("beta_constraint", None), ("gamma_constraint", None)], _check_norm,
    "keras.layers.BatchNormalization: batch statistics in training, the moving "
    "ones (non-trainable weights) in inference.")
LayerNormalization = _make_layer(
    "LayerNormalization",
    [("axis", -1), ("epsilon", 0.001), ("center", True), ("scale", True),
     ("beta_initializer", "zeros"), ("gamma_initializer", "ones"),
     ("beta_regularizer", None), ("gamma_regularizer", None),
     ("beta_constraint", None), ("gamma_constraint", None)], _check_norm)
