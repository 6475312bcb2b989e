"""strata.keras.layers: Keras's layers, as configs the C++ model runtime
builds (model/: every layer of README "Layers"), and the symbolic tensors
the functional API calls them on.

A layer holds its Keras config (Keras's argument names and defaults) and
no weights of its own: the model it belongs to compiles into one C++ graph,
which owns them. Calling a layer on a ``keras.Input`` (or on another layer's
output) records the call and returns a ``KerasTensor`` whose shape the
runtime computed; a value the runtime refuses raises at that call, naming
the layer and the argument ("layer 'conv2d' (Conv2D): argument 'padding':
...").

The layers live in layers_args (the shared argument checks), layers_base
(KerasTensor, Layer, InputLayer / Input, the functional config,
_make_layer), layers_core (Dense, Activation, Dropout, Flatten, Reshape,
Embedding), layers_conv (convolution and pooling), layers_normalization
and layers_merge (the merge and feature-interaction layers); this module
re-exports them all, private names included.
"""
# strata.keras.layers.NAME, for every name of the modules (F401: re-exports).
from .layers_args import (_ACTIVATIONS, _NAME_COUNTS, _REQUIRED, _SHORT_ACTIVATIONS,
                          _activation, _check_channels_last, _check_constraints,
                          _check_initializers, _check_regularizers, _choice,
                          _positive_int, _shape, _snake, _tuple, _unique_name,
                          clear_session)
from .layers_base import (Input, InputLayer, KerasTensor, Layer, _call_shape,
                          _flatten_tensors, _functional_config, _graph_inputs,
                          _history_tensors, _make_layer)
from .layers_core import (Activation, Dense, Dropout, Embedding, Flatten, Reshape,
                          _DENSE_ARGS, _DenseBase, _DropoutBase, _FlattenBase,
                          _check_activation, _check_dense, _check_dropout,
                          _check_reshape)
from .layers_conv import (AveragePooling1D, AveragePooling2D, AvgPool1D, AvgPool2D,
                          Conv1D, Conv2D, Convolution1D, Convolution2D,
                          GlobalAveragePooling1D, GlobalAveragePooling2D,
                          GlobalAvgPool1D, GlobalAvgPool2D, GlobalMaxPool1D,
                          GlobalMaxPool2D, GlobalMaxPooling1D, GlobalMaxPooling2D,
                          MaxPool1D, MaxPool2D, MaxPooling1D, MaxPooling2D,
                          _GlobalAveragePooling1DBase, _conv_args, _conv_check,
                          _global_check, _pool_check)
from .layers_normalization import BatchNormalization, LayerNormalization, _check_norm
from .layers_merge import (Add, Concatenate, Cross, Dot, DotInteraction, Multiply,
                           _check_cross, _check_dot, _check_interaction, _check_merge,
                           add, concatenate, dot, multiply)


# Keras class name -> class, for from_config / model_from_json.
_CLASSES = {cls._class_name: cls for cls in (
    InputLayer, Dense, Activation, Dropout, Flatten, Reshape, Conv1D, Conv2D,
    MaxPooling1D, MaxPooling2D, AveragePooling1D, AveragePooling2D,
    GlobalAveragePooling1D, GlobalAveragePooling2D, GlobalMaxPooling1D,
    GlobalMaxPooling2D, BatchNormalization, LayerNormalization, Concatenate, Add,
    Multiply, Dot, DotInteraction, Cross, Embedding)}
_ALIASES = {"Convolution1D": "Conv1D", "Convolution2D": "Conv2D",
            "MaxPool1D": "MaxPooling1D", "MaxPool2D": "MaxPooling2D",
            "AvgPool1D": "AveragePooling1D", "AvgPool2D": "AveragePooling2D",
            "GlobalAvgPool1D": "GlobalAveragePooling1D",
            "GlobalAvgPool2D": "GlobalAveragePooling2D",
            "GlobalMaxPool1D": "GlobalMaxPooling1D",
            "GlobalMaxPool2D": "GlobalMaxPooling2D"}


def deserialize(entry):
    """A layer from its {"class_name", "config"} entry."""
    class_name = _ALIASES.get(entry.get("class_name"), entry.get("class_name"))
    cls = _CLASSES.get(class_name)
    if cls is None:
        raise ValueError("Unknown layer: %r. strata.keras.layers has %s"
                         % (entry.get("class_name"), ", ".join(sorted(_CLASSES))))
    config = dict(entry.get("config") or {})
    if "batch_shape" in config and "batch_input_shape" not in config:
        config["batch_input_shape"] = config.pop("batch_shape")
    for k in ("build_config", "module", "registered_name"):
        config.pop(k, None)
    if isinstance(config.get("dtype"), dict):  # Keras 3's DTypePolicy
        config["dtype"] = config["dtype"].get("config", {}).get("name", "float32")
    return cls.from_config(config)


def serialize(layer):
    return layer._keras_entry()


# The classes' module is strata.keras.layers, where they are found (and
# where they were made before the split; _make_layer's would otherwise name
# layers_base): their repr, and pickling by reference.
for _cls in (KerasTensor, Layer, _DenseBase, _DropoutBase, _FlattenBase,
             _GlobalAveragePooling1DBase) + tuple(_CLASSES.values()):
    _cls.__module__ = __name__
del _cls
