"""strata.keras.layers (layers_merge): the merge layers (Concatenate, Add,
Multiply, Dot and their functional forms) and TensorFlow Recommenders'
feature-interaction layers (DotInteraction, Cross). strata.keras.layers
re-exports every name here."""
from .layers_args import (_REQUIRED, _check_initializers, _check_regularizers,
                          _positive_int)
from .layers_base import _make_layer


def _check_merge(layer, c):
    pass


Concatenate = _make_layer("Concatenate", [("axis", -1)], _check_merge)
Add = _make_layer("Add", [], _check_merge)
Multiply = _make_layer("Multiply", [], _check_merge)


def _check_dot(layer, c):
    if isinstance(c["axes"], (list, tuple)):
        c["axes"] = [int(a) for a in c["axes"]]
    c["normalize"] = bool(c["normalize"])


Dot = _make_layer("Dot", [("axes", _REQUIRED), ("normalize", False)], _check_dot)


def concatenate(inputs, axis=-1, **kwargs):
    return Concatenate(axis=axis, **kwargs)(inputs)


def add(inputs, **kwargs):
    return Add(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    return Multiply(**kwargs)(inputs)


def dot(inputs, axes, normalize=False, **kwargs):
    return Dot(axes=axes, normalize=normalize, **kwargs)(inputs)


def _check_interaction(layer, c):
    c["self_interaction"] = bool(c["self_interaction"])
    c["skip_gather"] = bool(c["skip_gather"])


DotInteraction = _make_layer(
    "DotInteraction", [("self_interaction", False), ("skip_gather", False)],
    _check_interaction,
    "DLRM's pairwise dot products of its inputs (TensorFlow Recommenders' "
    "tfrs.layers.feature_interaction.DotInteraction).")


def _check_cross(layer, c):
    if c["projection_dim"] is not None:
        c["projection_dim"] = _positive_int(layer, "projection_dim", c["projection_dim"])
    c["use_bias"] = bool(c["use_bias"])
    _check_initializers(layer, c, "kernel_initializer", "bias_initializer")
    _check_regularizers(layer, c, "kernel_regularizer", "bias_regularizer")


Cross = _make_layer(
    "Cross", [("projection_dim", None), ("diag_scale", 0.0), ("use_bias", True),
              ("preactivation", None), ("kernel_initializer", "truncated_normal"),
              ("bias_initializer", "zeros"), ("kernel_regularizer", None),
              ("bias_regularizer", None)], _check_cross,
    "DCN-v2's cross layer, full or low-rank (projection_dim) (TensorFlow "
    "Recommenders' tfrs.layers.dcn.Cross): x0 * (W x + b) + x.")
