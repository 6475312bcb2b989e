"""strata.keras.models: Sequential, over the C++ SDK's Sequential.

The model is bound to the strategy current when it was built (inside
``strategy.scope()``, as Keras); ``compile`` builds the C++ model, and
``fit`` / ``evaluate`` / ``predict`` run there.

The model's methods live by concern in models_compile, models_data,
models_training and models_weights (mixins of Model); this module
re-exports the names others import from it (_Progbar, _features, ...).
"""
import json

import numpy as np

from .. import data as _data
from .. import distribute as _distribute
from . import saving as _saving
from . import layers as _layers
from .models_compile import _CompileMixin
from .models_data import _DataMixin, _features, _ids, _labels, _positive  # noqa: F401
from .models_training import _Progbar, _TrainingMixin  # noqa: F401
from .models_weights import _WeightsMixin


class Model(_CompileMixin, _DataMixin, _TrainingMixin, _WeightsMixin):
    """keras.Model: functional (``Model(inputs, outputs)`` over layers called
    on ``keras.Input`` tensors), subclassed (a ``call`` composing layers,
    traced once on symbolic inputs into the same graph), and the base of
    Sequential. The model is one C++ layer graph: compile / fit / evaluate /
    predict run there.

    Its methods, by concern: the graph, summary and config here; compile
    in models_compile, the data in models_data, fit / evaluate / predict in
    models_training, the weights in models_weights."""

    def __init__(self, *args, **kwargs):
        inputs = kwargs.pop("inputs", args[0] if len(args) > 0 else None)
        outputs = kwargs.pop("outputs", args[1] if len(args) > 1 else None)
        name = kwargs.pop("name", None)
        if kwargs.pop("trainable", True) is not True:
            raise ValueError("Model: `trainable=False` is not supported")
        if kwargs:
            raise TypeError("Model: Keyword argument not understood: %r"
                            % sorted(kwargs)[0])
        if name is not None and not isinstance(name, str):
            raise TypeError("Model: `name` must be a string")
        self._base_init(name or _layers._unique_name("model"))
        self._graph = None
        if inputs is not None or outputs is not None:
            if inputs is None or outputs is None:
                raise ValueError("Model: pass both `inputs` and `outputs`")
            self._set_graph(inputs, outputs)

    def _base_init(self, name):
        self.name = name
        self._py_metrics = []
        self._layers = []
        self._graph = None
        self._pending_weights = None
        self._strategy = _distribute.get_strategy()
        self._native = None
        self._embedding = None
        self._metric_names = []
        self._optimizer = None
        self._loss = None
        self.stop_training = False
        self.history = None
        self._fits = 0

    # --- the graph (functional and subclassed models) ---------------------
    def _set_graph(self, inputs, outputs):
        in_list = _layers._flatten_tensors(inputs)
        out_list = _layers._flatten_tensors(outputs)
        if not in_list or not out_list:
            raise ValueError("Model: `inputs` and `outputs` must be keras.Input "
                             "tensors and layer outputs (or lists / dicts of them)")
        input_layers = []
        for t in in_list:
            layer = t._keras_history[0]
            if not isinstance(layer, _layers.InputLayer):
                raise ValueError("Model: input %r is not a keras.Input tensor (it is "
                                 "the output of layer %s)" % (t.name, layer.name))
            input_layers.append(layer)
        order, seen = [], set()
        for t in out_list:
            _layers._history_tensors(t, seen, order)
        for layer, _ in order:
            if isinstance(layer, _layers.InputLayer) and layer not in input_layers:
                raise ValueError("Model: Graph disconnected: the outputs depend on "
                                 "input %r, which is not among the model's inputs"
                                 % layer.name)
        self.inputs, self.outputs = in_list, out_list
        self._input_names = [l.name for l in input_layers]
        self._input_keys = (sorted(inputs) if isinstance(inputs, dict) else None)
        self._graph = (order, input_layers,
                       [t._keras_history[:2] for t in out_list])
        layers = []
        for layer, _ in order:
            if layer not in layers:
                layers.append(layer)
        for layer in input_layers:  # an input no output reads
            if layer not in layers:
                layers.insert(0, layer)
        self._layers = layers
        self._native = None

    def call(self, inputs, training=None, mask=None):
        raise NotImplementedError(
            "Model: a subclassed keras.Model must define call(self, inputs)")

    def build(self, input_shape):
        """Traces a subclassed model's `call` on an input of `input_shape`
        (with or without the batch dimension None)."""
        if self._graph is not None:
            return
        shape = tuple(input_shape)
        if shape and shape[0] is None:
            shape = shape[1:]
        inputs = _layers.Input(shape=shape)
        outputs = self.call(inputs)
        self._set_graph(inputs, outputs)

    def _ensure_built(self, x=None):
        """A subclassed model is traced on its first data (or build)."""
        if self._graph is not None or isinstance(self, Sequential):
            return
        if type(self).call is Model.call:
            raise ValueError("Model: build it with keras.Model(inputs, outputs), or "
                             "subclass keras.Model and define call()")
        if x is None:
            raise ValueError("Model: this model has not been built yet: call "
                             "model.build(input_shape) or fit it on data first")
        if isinstance(x, _distribute.DistributedDataset):
            x = x._global_dataset()
        if isinstance(x, _data.Dataset):
            x = x.features
        if isinstance(x, tuple) and len(x) == 2:
            x = x[0]
        a = np.asarray(x)
        self.build((None,) + a.shape[1:])

    @property
    def _multi_input(self):
        return self._graph is not None and len(self._graph[1]) > 1

    def _join_inputs(self, x, what):
        """A multi-input model's inputs (a list in input order, or a dict by
        input name) as one row per example: each input flattened, side by
        side, as the runtime reads them."""
        if not self._multi_input:
            return x
        names = self._input_names
        keys = getattr(self, "_input_keys", None)
        if isinstance(x, dict) and keys and all(k in x for k in keys):
            names = keys  # keyed as the inputs were given: Model({"a": ...}, ...)
        if isinstance(x, dict):
            missing = [n for n in names if n not in x]
            if missing:
                raise ValueError("%s: no data for input(s) %s (the dict holds %s)"
                                 % (what, missing, sorted(x)))
            parts = [x[n] for n in names]
        elif isinstance(x, (list, tuple)) and len(x) == len(names):
            parts = list(x)
        else:
            raise ValueError("%s: the model has %d inputs (%s): pass a list of %d "
                             "arrays or a dict by input name"
                             % (what, len(names), ", ".join(names), len(names)))
        arrays = [np.asarray(p, dtype=np.float32) for p in parts]
        n = len(arrays[0])
        for name, a, layer in zip(names, arrays, self._graph[1]):
            if len(a) != n:
                raise ValueError("%s: Data cardinality is ambiguous: input %s has %d "
                                 "examples, the first input %d" % (what, name, len(a), n))
            if a.shape[1:] != layer.input_shape and \
                    int(np.prod(a.shape[1:])) != int(np.prod(layer.input_shape)):
                raise ValueError("%s: input %s has shape %s per example; the model "
                                 "expects %s" % (what, name, a.shape[1:],
                                                 layer.input_shape))
        return np.concatenate([a.reshape(n, -1) for a in arrays], axis=1)

    def _graph_config(self):
        """The model as a Keras config ({"class_name", "config"}), or None
        when it runs on the short-list path (Sequential only)."""
        if self._graph is None:
            return None
        order, input_layers, outputs = self._graph
        return _layers._functional_config(self.name, order, input_layers, outputs)

    @property
    def layers(self):
        return list(self._layers)

    def get_layer(self, name=None, index=None):
        if index is not None:
            if name is not None:
                raise ValueError("get_layer: Provide only a layer name or a layer index")
            if not 0 <= index < len(self._layers):
                raise ValueError("get_layer: Was asked to retrieve layer at index %d "
                                 "but model only has %d layers"
                                 % (index, len(self._layers)))
            return self._layers[index]
        for layer in self._layers:
            if layer.name == name:
                return layer
        raise ValueError("No such layer: %s. Existing layers are: %s"
                         % (name, [l.name for l in self._layers]))

    @property
    def distribute_strategy(self):
        return self._strategy

    # --- summary ---------------------------------------------------------
    def summary(self, line_length=None, positions=None, print_fn=None,
                expand_nested=False, show_trainable=False, layer_range=None):
        """Keras's table: each layer, its output shape and parameter count
        (and, for a functional model, what it is connected to), then the
        total, trainable and non-trainable counts."""
        info = self._info() if (self._graph is not None or
                                isinstance(self, Sequential)) else None
        if info is None:
            self._ensure_built()
            text = self._require("calling summary()").summary()
            (print_fn or print)(text)
            return
        (print_fn or print)(_saving.summary_text(self, info, line_length))

    # --- config and saving -----------------------------------------------
    def _keras_config(self):
        """The Keras config of the model (every layer has one), or None for
        the embedding front end."""
        config = self._graph_config()
        if config is None and isinstance(self, Sequential) and \
                not any(isinstance(l, _layers.Embedding) for l in self._layers):
            config = self._sequential_config()
        return config

    def get_config(self):
        config = self._keras_config()
        if config is None:
            return {"name": self.name, "layers": self._specs()}
        return config["config"]

    @classmethod
    def from_config(cls, config, custom_objects=None):
        kind = "Sequential" if cls is Sequential else "Functional"
        return _saving.model_from_config({"class_name": kind, "config": config})

    def to_json(self, **kwargs):
        config = self._keras_config()
        if config is None:
            raise ValueError("to_json: a Sequential model starting with an Embedding "
                             "(the dynamic tables' front end) has no Keras config; "
                             "build the model functionally to export it")
        return json.dumps(dict(config, keras_version="2.11.0", backend="tensorflow"),
                          **kwargs)

    def save(self, filepath, overwrite=True, save_format=None, include_optimizer=True,
             **kwargs):
        """Keras's .keras archive: config.json (the model and its compile
        arguments), metadata.json and model.weights.h5."""
        _saving.save_model(self, filepath, overwrite, save_format)


class Sequential(Model):
    """A linear stack of layers (keras.Sequential)."""

    def __init__(self, layers=None, name=None):
        if name is not None and not isinstance(name, str):
            raise TypeError("Sequential: `name` must be a string")
        self._base_init(name or "sequential")
        self._input_shape = None
        for layer in layers or []:
            self.add(layer)

    def add(self, layer):
        if isinstance(layer, _layers.KerasTensor) and \
                isinstance(layer._keras_history[0], _layers.InputLayer):
            layer = layer._keras_history[0]
        if not isinstance(layer, _layers.Layer):
            raise TypeError("The added layer must be an instance of class Layer. "
                            "Received: layer=%r of type %s" % (layer, type(layer)))
        if isinstance(layer, _layers.InputLayer):
            if self._layers:
                raise ValueError("Sequential: an Input must come first")
            self._input_shape = layer.input_shape
            return
        if self._layers and layer.input_shape is not None:
            raise ValueError("Sequential: only the first layer may have an "
                             "`input_shape` (layer %d has one)" % len(self._layers))
        self._keep_weights()
        self._layers.append(layer)
        self._native = None

    def pop(self):
        if not self._layers:
            raise TypeError("There are no layers in the model.")
        self._keep_weights()
        self._layers.pop()
        self._native = None

    def _keep_weights(self):
        """Before the layers change: the trained layers' weights, for the
        next compile (Keras keeps each layer's variables)."""
        if self._native is not None and (getattr(self, "_weights_touched", False) or
                                         getattr(self, "_inference_only", False)):
            self._carry = self._weights_by_layer()

    def _graph_config(self):
        if any(isinstance(l, _layers.Embedding) for l in self._layers) or \
                all(l._spec() is not None for l in self._layers):
            return None  # the short-list path
        return self._sequential_config()

    def _sequential_config(self):
        shape = self._input_shape
        if shape is None and self._layers:
            shape = self._layers[0].input_shape
        if shape is None:
            raise ValueError("compile: the first layer needs an `input_shape` (or start "
                             "the model with keras.Input(shape=...))")
        entries = [{"class_name": "InputLayer",
                    "config": {"batch_input_shape": [None] + list(shape),
                               "dtype": "float32", "sparse": False, "ragged": False,
                               "name": self.name + "_input"}}]
        for layer in self._layers:
            entry = layer._keras_entry()
            entry["config"].pop("batch_input_shape", None)
            entries.append(entry)
        return {"class_name": "Sequential", "config": {"name": self.name,
                                                       "layers": entries}}


load_model = _saving.load_model
model_from_json = _saving.model_from_json
model_from_config = _saving.model_from_config
save_model = _saving.save_model
