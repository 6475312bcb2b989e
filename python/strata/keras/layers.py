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
"""
import json
import numbers
import re

from .. import _strata
from . import initializers as _initializers
from . import regularizers as _regularizers

_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu",
                "swish", "elu", "leaky_relu", "selu", "softplus", "relu6",
                "hard_sigmoid", "exponential")
# What the short-list path (the GPU MLP, the embedding front end) computes.
_SHORT_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax")

_REQUIRED = object()

# Keras's automatic names: "dense", "dense_1", ... per class name.
_NAME_COUNTS = {}


def _snake(class_name):
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", class_name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def _unique_name(base):
    n = _NAME_COUNTS.get(base, 0)
    _NAME_COUNTS[base] = n + 1
    return base if n == 0 else "%s_%d" % (base, n)


def clear_session():
    """Resets the automatic layer and model names (keras.backend.clear_session)."""
    _NAME_COUNTS.clear()


def _positive_int(layer, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError("%s: Received an invalid value for argument `%s`, "
                         "expected a positive integer, got %r" % (layer, name, value))
    return int(value)


def _shape(layer, name, value):
    if value is None:
        return None
    if isinstance(value, numbers.Integral):
        value = (value,)
    try:
        shape = tuple(value)
    except TypeError:
        raise ValueError("%s: `%s` must be a tuple of positive integers, got %r"
                         % (layer, name, value)) from None
    if not shape or any(isinstance(d, bool) or not isinstance(d, numbers.Integral)
                        or d < 1 for d in shape):
        raise ValueError("%s: `%s` must be a tuple of positive integers, got %r"
                         % (layer, name, value))
    return tuple(int(d) for d in shape)


def _tuple(layer, name, value, n):
    """Keras's normalize_tuple: an int, or n ints, as a list of n ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return [int(value)] * n
    try:
        values = [int(v) for v in value]
    except (TypeError, ValueError):
        raise ValueError("%s: The `%s` argument must be a tuple of %d integers. "
                         "Received: %r" % (layer, name, n, value)) from None
    if len(values) != n:
        raise ValueError("%s: The `%s` argument must be a tuple of %d integers. "
                         "Received: %r" % (layer, name, n, value))
    return values


def _activation(layer, value):
    if value is None:
        return "linear"
    if callable(value):
        value = getattr(value, "__name__", repr(value))
    if value not in _ACTIVATIONS:
        raise ValueError("%s: Unknown activation function: %r; expected one of %s"
                         % (layer, value, ", ".join(_ACTIVATIONS)))
    return value


def _choice(layer, name, value, allowed):
    if value not in allowed:
        raise ValueError("%s: Invalid value for argument `%s`: %r (expected one of %s)"
                         % (layer, name, value, ", ".join(repr(a) for a in allowed)))
    return value


class KerasTensor:
    """A symbolic tensor: an Input, or the output of a layer's call.
    ``shape`` has None for the batch dimension."""

    def __init__(self, shape, layer, node_index, dtype="float32", name=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name or layer.name
        self._keras_history = (layer, node_index, 0)

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return "<KerasTensor shape=%s, dtype=%s, name=%s>" % (self.shape, self.dtype,
                                                              self.name)

    # Arithmetic between symbolic tensors is the merge layers.
    def __add__(self, other):
        return Add()([self, other])

    def __mul__(self, other):
        return Multiply()([self, other])


def _flatten_tensors(inputs):
    if isinstance(inputs, KerasTensor):
        return [inputs]
    if isinstance(inputs, dict):
        return [t for k in sorted(inputs) for t in _flatten_tensors(inputs[k])]
    if isinstance(inputs, (list, tuple)):
        return [t for v in inputs for t in _flatten_tensors(v)]
    return None


def _history_tensors(tensor, seen, order):
    """The layers the tensor depends on, in call order (depth first)."""
    layer, node, _ = tensor._keras_history
    if (id(layer), node) in seen:
        return
    seen.add((id(layer), node))
    for t in layer._inbound[node]:
        _history_tensors(t, seen, order)
    order.append((layer, node))


class Layer:
    """The base of Keras's layers: a name, a config, and calls on tensors."""

    _class_name = None

    def __init__(self, trainable=True, name=None, dtype=None, input_shape=None,
                 batch_input_shape=None, batch_size=None, input_dim=None, **kwargs):
        cls = type(self).__name__
        for kw in kwargs:
            if kw not in ("weights", "activity_regularizer", "autocast", "dynamic",
                          "implementation"):
                raise TypeError("%s: Keyword argument not understood: %r" % (cls, kw))
        if kwargs.get("activity_regularizer") is not None:
            raise ValueError("%s: `activity_regularizer` is not supported" % cls)
        if kwargs.get("weights") is not None:
            raise ValueError("%s: `weights` is not supported (use set_weights after "
                             "compile)" % cls)
        if name is not None and not isinstance(name, str):
            raise TypeError("%s: `name` must be a string" % cls)
        if dtype not in (None, "float32"):
            raise ValueError("%s: `dtype` %r is not supported (only float32)"
                             % (cls, dtype))
        if trainable is not True:
            raise ValueError("%s: `trainable=False` is not supported" % cls)
        self._given_name = name
        self.name = name or _unique_name(_snake(self._class_name or cls))
        if input_dim is not None and input_shape is None:
            input_shape = (_positive_int(cls, "input_dim", input_dim),)
        if input_shape is None and batch_input_shape is not None:
            input_shape = tuple(batch_input_shape)[1:]
        self.input_shape = _shape(cls, "input_shape", input_shape)
        self.trainable = True
        self._config = {}
        self._inbound = []   # per call: the input tensors
        self._outbound = []  # per call: the output tensor

    # --- the config ------------------------------------------------------
    def get_config(self):
        config = {"name": self.name, "trainable": True, "dtype": "float32"}
        if self.input_shape is not None:
            config["batch_input_shape"] = [None] + list(self.input_shape)
        config.update(self._config)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("trainable", None)
        config.pop("dtype", None)
        return cls(**config)

    def _keras_entry(self):
        return {"class_name": self._class_name, "config": self.get_config()}

    def _spec(self):
        """The short-list form (dense / dropout / flatten / embedding /
        global_average_pooling1d), or None when only the layer graph runs
        this layer."""
        return None

    def _named_spec(self, spec):
        spec["name"] = self.name
        if self.input_shape:
            spec["input_shape"] = list(self.input_shape)
        return spec

    # --- calls -----------------------------------------------------------
    def __call__(self, inputs, *args, **kwargs):
        tensors = _flatten_tensors(inputs)
        if tensors is None:
            raise TypeError(
                "%s (%s): called on %s; a strata layer is called on keras.Input "
                "tensors or other layers' outputs to build a model (keras.Model("
                "inputs, outputs)), and the model computes: use model.predict or "
                "model(x)" % (self.name, type(self).__name__, type(inputs).__name__))
        unknown = set(kwargs) - {"training", "mask"}
        if args or unknown:
            raise TypeError("%s (%s): call arguments %s are not supported"
                            % (self.name, type(self).__name__,
                               ", ".join(sorted(unknown)) or "(positional)"))
        node = len(self._inbound)
        self._inbound.append(tensors)
        try:
            shape = _call_shape(self, node)
        except Exception:
            self._inbound.pop()
            raise
        out = KerasTensor((None,) + tuple(shape), self, node)
        self._outbound.append(out)
        return out

    # --- weights (held by the compiled model the layer belongs to) -------
    def _model(self, what):
        owner = getattr(self, "_owner", None)
        if owner is None or owner._native is None:
            raise ValueError("%s.%s: the layer's weights live in its model: compile "
                             "(or call) a model holding it first" % (self.name, what))
        return owner

    def get_weights(self):
        return self._model("get_weights")._layer_weights(self.name)

    def set_weights(self, weights):
        self._model("set_weights")._set_layer_weights(self.name, list(weights))

    @property
    def weights(self):
        return self.get_weights()

    def build(self, input_shape):
        """Keras's build: the runtime builds every layer with its model."""

    @property
    def output(self):
        if not self._outbound:
            raise AttributeError("Layer %s has no inbound nodes." % self.name)
        return self._outbound[0]

    @property
    def output_shape(self):
        return self.output.shape

    def __repr__(self):
        return "<%s name=%s>" % (type(self).__name__, self.name)


def _call_shape(layer, node):
    """The per-example output shape of call `node` of `layer`, from the
    runtime: the graph of everything the call depends on, built in C++
    (which checks every argument and shape on the way)."""
    order = []
    seen = set()
    for t in layer._inbound[node]:
        _history_tensors(t, seen, order)
    order.append((layer, node))
    config = _functional_config("shape_probe", order,
                                [t for t in _graph_inputs(order)], [(layer, node)])
    info = _strata.keras_graph_info(json.dumps(config))
    return info["outputs"][0]


def _graph_inputs(order):
    inputs = []
    for layer, _ in order:
        if isinstance(layer, InputLayer) and layer not in inputs:
            inputs.append(layer)
    return inputs


def _functional_config(name, order, input_layers, output_nodes):
    """A tf.keras 2.x Functional config of the calls in `order` ((layer,
    node) pairs in call order, InputLayers included)."""
    entries = {}
    layers = []
    node_numbers = {}  # (id(layer), node) -> the node's index in the config
    for layer, node in order:
        entry = entries.get(id(layer))
        if entry is None:
            entry = {"class_name": layer._class_name, "config": layer.get_config(),
                     "name": layer.name, "inbound_nodes": []}
            entries[id(layer)] = entry
            layers.append(entry)
        if isinstance(layer, InputLayer):
            node_numbers[(id(layer), node)] = 0
            continue
        node_numbers[(id(layer), node)] = len(entry["inbound_nodes"])
        call = []
        for t in layer._inbound[node]:
            src, src_node, index = t._keras_history
            call.append([src.name, node_numbers[(id(src), src_node)], index, {}])
        entry["inbound_nodes"].append(call)
    return {"class_name": "Functional",
            "config": {"name": name, "layers": layers,
                       "input_layers": [[l.name, 0, 0] for l in input_layers],
                       "output_layers": [[l.name, node_numbers[(id(l), n)], 0]
                                         for l, n in output_nodes]}}


class InputLayer(Layer):
    """keras.Input(shape=...) / InputLayer: a model input."""

    _class_name = "InputLayer"

    def __init__(self, input_shape=None, batch_size=None, dtype=None, name=None,
                 shape=None, **kwargs):
        if dtype not in (None, "float32", "int32", "int64"):
            raise ValueError("Input: `dtype` %r is not supported (float32, or int32 / "
                             "int64 ids, which the model reads as floats)" % (dtype,))
        super().__init__(name=name, input_shape=shape if shape is not None else input_shape,
                         **{k: v for k, v in kwargs.items() if k == "batch_input_shape"})
        unknown = set(kwargs) - {"batch_input_shape", "sparse", "ragged", "type_spec"}
        if unknown:
            raise TypeError("InputLayer: Keyword argument not understood: %r"
                            % sorted(unknown)[0])
        if kwargs.get("sparse") or kwargs.get("ragged"):
            raise ValueError("InputLayer: sparse and ragged inputs are not supported")
        if self.input_shape is None:
            raise ValueError("Input: `shape` is required")
        self._inbound.append([])
        self._outbound.append(KerasTensor((None,) + self.input_shape, self, 0,
                                          dtype=dtype or "float32", name=self.name))

    def get_config(self):
        return {"batch_input_shape": [None] + list(self.input_shape),
                "dtype": "float32", "sparse": False, "ragged": False, "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(input_shape=tuple(config["batch_input_shape"])[1:],
                   name=config.get("name"))


def Input(shape=None, batch_size=None, name=None, dtype=None, sparse=None,
          tensor=None, ragged=None, type_spec=None, batch_shape=None, **kwargs):
    """keras.Input: a symbolic tensor of per-example `shape`."""
    if kwargs:
        raise TypeError("Input: Keyword argument not understood: %r" % sorted(kwargs)[0])
    if shape is None and batch_shape is not None:
        shape = tuple(batch_shape)[1:]
    if tensor is not None or type_spec is not None:
        raise ValueError("Input: `tensor` and `type_spec` are not supported")
    return InputLayer(shape=shape, name=name, dtype=dtype, sparse=sparse,
                      ragged=ragged).output


def _make_layer(class_name, params, check=None, doc=None, base=Layer):
    """A layer class with Keras's constructor: `params` are (argument,
    default) in Keras's order (_REQUIRED: positional, required); `check`
    normalizes and validates the config dict in place."""

    def __init__(self, *args, **kwargs):
        if len(args) > len(params):
            raise TypeError("%s: takes %d positional arguments, got %d"
                            % (class_name, len(params), len(args)))
        config = {}
        for (arg, default), value in zip(params, args):
            config[arg] = value
        for arg, default in params:
            if arg in kwargs:
                if arg in config:
                    raise TypeError("%s: got multiple values for argument %r"
                                    % (class_name, arg))
                config[arg] = kwargs.pop(arg)
            elif arg not in config:
                if default is _REQUIRED:
                    raise TypeError("%s.__init__() missing 1 required positional "
                                    "argument: %r" % (class_name, arg))
                config[arg] = default
        base.__init__(self, **kwargs)
        if check is not None:
            check(class_name, config)
        self._config = config
        for arg, value in config.items():
            setattr(self, arg, value)

    cls = type(class_name, (base,), {"__init__": __init__, "_class_name": class_name,
                                     "__doc__": doc or "keras.layers.%s" % class_name})
    return cls


def _check_initializers(layer, config, *names):
    for n in names:
        if n in config:
            config[n] = _initializers.serialize(layer, n, config[n])


def _check_regularizers(layer, config, *names):
    for n in names:
        if n in config:
            config[n] = _regularizers.serialize(layer, n, config[n])


def _check_constraints(layer, config, *names):
    for n in names:
        if config.get(n) is not None:
            raise ValueError("%s: `%s` is not supported" % (layer, n))


def _check_dense(layer, c):
    c["units"] = _positive_int(layer, "units", c["units"])
    c["activation"] = _activation(layer, c["activation"])
    c["use_bias"] = bool(c["use_bias"])
    _check_initializers(layer, c, "kernel_initializer", "bias_initializer")
    _check_regularizers(layer, c, "kernel_regularizer", "bias_regularizer")
    _check_constraints(layer, c, "kernel_constraint", "bias_constraint")
    if c.get("activity_regularizer") is not None:
        raise ValueError("%s: `activity_regularizer` is not supported" % layer)
    c.pop("activity_regularizer", None)


_DENSE_ARGS = [("units", _REQUIRED), ("activation", None), ("use_bias", True),
               ("kernel_initializer", "glorot_uniform"), ("bias_initializer", "zeros"),
               ("kernel_regularizer", None), ("bias_regularizer", None),
               ("activity_regularizer", None), ("kernel_constraint", None),
               ("bias_constraint", None)]

_DenseBase = _make_layer("Dense", _DENSE_ARGS, _check_dense)


class Dense(_DenseBase):
    """keras.layers.Dense: activation(x @ kernel + bias), kernel [in, units]."""

    def _spec(self):
        c = self._config
        if (c["activation"] not in _SHORT_ACTIVATIONS
                or c["kernel_initializer"]["class_name"] != "GlorotUniform"
                or c["kernel_initializer"]["config"].get("seed") is not None
                or c["bias_initializer"]["class_name"] != "Zeros"
                or c["kernel_regularizer"] is not None or c["bias_regularizer"] is not None):
            return None
        return self._named_spec({"type": "dense", "units": c["units"],
                                 "activation": c["activation"],
                                 "use_bias": c["use_bias"]})


def _check_activation(layer, c):
    c["activation"] = _activation(layer, c["activation"])


Activation = _make_layer("Activation", [("activation", _REQUIRED)], _check_activation)


def _check_dropout(layer, c):
    rate = c["rate"]
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
        raise ValueError("%s: Invalid value received for `rate`, expected a value "
                         "between 0 and 1, got: %r" % (layer, rate))
    c["rate"] = float(rate)
    if c["noise_shape"] is not None:
        raise ValueError("%s: `noise_shape` is not supported" % layer)


_DropoutBase = _make_layer("Dropout", [("rate", _REQUIRED), ("noise_shape", None),
                                       ("seed", None)], _check_dropout)


class Dropout(_DropoutBase):
    """keras.layers.Dropout: zeroes a `rate` fraction in training."""

    def _spec(self):
        if self._config["seed"] is not None:
            return None
        return self._named_spec({"type": "dropout", "rate": self._config["rate"]})


def _check_channels_last(layer, c):
    if c.get("data_format") not in (None, "channels_last"):
        raise ValueError("%s: `data_format` %r is not supported (only 'channels_last')"
                         % (layer, c["data_format"]))
    if "data_format" in c:
        c["data_format"] = "channels_last"


_FlattenBase = _make_layer("Flatten", [("data_format", None)], _check_channels_last)


class Flatten(_FlattenBase):
    """keras.layers.Flatten: one example's values as one vector."""

    def _spec(self):
        return self._named_spec({"type": "flatten"})


def _check_reshape(layer, c):
    try:
        c["target_shape"] = [int(d) for d in c["target_shape"]]
    except (TypeError, ValueError):
        raise ValueError("%s: `target_shape` must be a tuple of integers, got %r"
                         % (layer, c["target_shape"])) from None


Reshape = _make_layer("Reshape", [("target_shape", _REQUIRED)], _check_reshape)


def _conv_check(rank):
    def check(layer, c):
        c["filters"] = _positive_int(layer, "filters", c["filters"])
        c["kernel_size"] = _tuple(layer, "kernel_size", c["kernel_size"], rank)
        c["strides"] = _tuple(layer, "strides", c["strides"], rank)
        c["dilation_rate"] = _tuple(layer, "dilation_rate", c["dilation_rate"], rank)
        c["padding"] = _choice(layer, "padding", c["padding"], ("valid", "same"))
        _check_channels_last(layer, c)
        c["activation"] = _activation(layer, c["activation"])
        c["use_bias"] = bool(c["use_bias"])
        if c["groups"] != 1:
            raise ValueError("%s: `groups` %r is not supported (only 1)"
                             % (layer, c["groups"]))
        _check_initializers(layer, c, "kernel_initializer", "bias_initializer")
        _check_regularizers(layer, c, "kernel_regularizer", "bias_regularizer")
        _check_constraints(layer, c, "kernel_constraint", "bias_constraint")
        if c.pop("activity_regularizer", None) is not None:
            raise ValueError("%s: `activity_regularizer` is not supported" % layer)
    return check


def _conv_args(rank):
    return [("filters", _REQUIRED), ("kernel_size", _REQUIRED),
            ("strides", (1,) * rank), ("padding", "valid"), ("data_format", None),
            ("dilation_rate", (1,) * rank), ("groups", 1), ("activation", None),
            ("use_bias", True), ("kernel_initializer", "glorot_uniform"),
            ("bias_initializer", "zeros"), ("kernel_regularizer", None),
            ("bias_regularizer", None), ("activity_regularizer", None),
            ("kernel_constraint", None), ("bias_constraint", None)]


Conv1D = _make_layer("Conv1D", _conv_args(1), _conv_check(1),
                     "keras.layers.Conv1D: kernel [k, in, filters], channels last.")
Conv2D = _make_layer("Conv2D", _conv_args(2), _conv_check(2),
                     "keras.layers.Conv2D: kernel [kh, kw, in, filters], channels last.")
Convolution1D = Conv1D
Convolution2D = Conv2D


def _pool_check(rank):
    def check(layer, c):
        c["pool_size"] = _tuple(layer, "pool_size", c["pool_size"], rank)
        c["strides"] = (list(c["pool_size"]) if c["strides"] is None
                        else _tuple(layer, "strides", c["strides"], rank))
        c["padding"] = _choice(layer, "padding", c["padding"], ("valid", "same"))
        _check_channels_last(layer, c)
    return check


MaxPooling1D = _make_layer("MaxPooling1D", [("pool_size", 2), ("strides", None),
                                            ("padding", "valid"),
                                            ("data_format", "channels_last")],
                           _pool_check(1))
AveragePooling1D = _make_layer("AveragePooling1D", [("pool_size", 2), ("strides", None),
                                                    ("padding", "valid"),
                                                    ("data_format", "channels_last")],
                               _pool_check(1))
MaxPooling2D = _make_layer("MaxPooling2D", [("pool_size", (2, 2)), ("strides", None),
                                            ("padding", "valid"), ("data_format", None)],
                           _pool_check(2))
AveragePooling2D = _make_layer("AveragePooling2D", [("pool_size", (2, 2)),
                                                    ("strides", None),
                                                    ("padding", "valid"),
                                                    ("data_format", None)],
                               _pool_check(2))
MaxPool1D, MaxPool2D = MaxPooling1D, MaxPooling2D
AvgPool1D, AvgPool2D = AveragePooling1D, AveragePooling2D


def _global_check(layer, c):
    _check_channels_last(layer, c)
    c["keepdims"] = bool(c["keepdims"])


_GlobalAveragePooling1DBase = _make_layer(
    "GlobalAveragePooling1D", [("data_format", "channels_last"), ("keepdims", False)],
    _global_check)


class GlobalAveragePooling1D(_GlobalAveragePooling1DBase):
    """keras.layers.GlobalAveragePooling1D: the mean over the steps axis.
    Right after a Sequential model's first layer, an Embedding, it is the
    embedding front end's mean of rows."""

    def _spec(self):
        if self._config["keepdims"]:
            return None
        return self._named_spec({"type": "global_average_pooling1d"})


GlobalAveragePooling2D = _make_layer(
    "GlobalAveragePooling2D", [("data_format", None), ("keepdims", False)], _global_check)
GlobalMaxPooling1D = _make_layer(
    "GlobalMaxPooling1D", [("data_format", "channels_last"), ("keepdims", False)],
    _global_check)
GlobalMaxPooling2D = _make_layer(
    "GlobalMaxPooling2D", [("data_format", None), ("keepdims", False)], _global_check)
GlobalAvgPool1D, GlobalAvgPool2D = GlobalAveragePooling1D, GlobalAveragePooling2D
GlobalMaxPool1D, GlobalMaxPool2D = GlobalMaxPooling1D, GlobalMaxPooling2D


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


class Embedding(Layer):
    """keras.layers.Embedding: integer ids in [0, input_dim) -> rows of
    `output_dim` values.

    In a functional model (or a Sequential model whose first layer is not
    it) it is the runtime's Embedding layer: an input_dim x output_dim
    matrix, trained like any other weight. As the first layer of a
    Sequential model, followed by Flatten (the rows of the `input_length`
    <= 26 ids side by side) or GlobalAveragePooling1D (their mean; any
    input_length), then Dense layers ending in one sigmoid unit with
    binary_crossentropy, its rows are a dynamic embedding table (made on
    first touch from the seed, trained where the table lives: here, or on
    the PS tasks under ParameterServerStrategy), so get_weights() holds the
    dense layers' weights only; the table trains with the compiled
    optimizer's counterpart for rows: SGD as sgd, Adam as lazy Adam,
    Adagrad as adagrad."""

    _class_name = "Embedding"

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, activity_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, input_length=None,
                 sparse=False, name=None, input_shape=None, **kwargs):
        if input_length is not None and input_shape is None:
            input_shape = (_positive_int("Embedding", "input_length", input_length),)
        super().__init__(name=name, input_shape=input_shape, **kwargs)
        self.input_dim = _positive_int("Embedding", "input_dim", input_dim)
        self.output_dim = _positive_int("Embedding", "output_dim", output_dim)
        if self.output_dim > 4096:
            raise ValueError("Embedding: `output_dim` must be at most 4096, got %d"
                             % self.output_dim)
        if embeddings_initializer not in ("uniform", "random_uniform"):
            raise ValueError("Embedding: `embeddings_initializer` %r is not supported "
                             "(only 'uniform': RandomUniform(-0.05, 0.05))"
                             % (embeddings_initializer,))
        for arg, value in (("embeddings_regularizer", embeddings_regularizer),
                           ("activity_regularizer", activity_regularizer),
                           ("embeddings_constraint", embeddings_constraint)):
            if value is not None:
                raise ValueError("Embedding: `%s` is not supported" % arg)
        if mask_zero:
            raise ValueError("Embedding: `mask_zero=True` is not supported (id 0 is a "
                             "row like any other)")
        if sparse:
            raise ValueError("Embedding: `sparse=True` is not supported")
        if self.input_shape is not None and len(self.input_shape) != 1:
            raise ValueError("Embedding: the input is 1-D per example (input_length "
                             "ids), got input_shape %r" % (self.input_shape,))
        self._config = {"input_dim": self.input_dim, "output_dim": self.output_dim,
                        "embeddings_initializer": {"class_name": "RandomUniform",
                                                   "config": {"minval": -0.05,
                                                              "maxval": 0.05,
                                                              "seed": None}}}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for k in ("trainable", "dtype", "embeddings_initializer"):
            config.pop(k, None)
        bis = config.pop("batch_input_shape", None)
        if bis is not None:
            config["input_shape"] = tuple(bis)[1:]
        return cls(**config)

    def _spec(self):
        spec = self._named_spec({"type": "embedding", "input_dim": self.input_dim,
                                 "output_dim": self.output_dim})
        if not self._given_name:
            spec.pop("name")  # the table is "embedding" unless named
        return spec


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
