"""strata.keras.layers (layers_base): the symbolic tensors of the
functional API (KerasTensor, keras.Input), the Layer base class and its
calls, the functional config of a graph of calls (which the runtime
builds: each call's output shape, and the model), and _make_layer, which
makes a layer class from its Keras arguments. strata.keras.layers
re-exports every name here."""
import json

from .. import _strata
from .layers_args import _REQUIRED, _positive_int, _shape, _snake, _unique_name


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
        from .layers_merge import Add
        return Add()([self, other])

    def __mul__(self, other):
        from .layers_merge import Multiply
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
