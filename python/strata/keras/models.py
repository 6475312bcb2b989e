"""strata.keras.models: Sequential, over the C++ SDK's Sequential.

The model is bound to the strategy current when it was built (inside
``strategy.scope()``, as Keras); ``compile`` builds the C++ model, and
``fit`` / ``evaluate`` / ``predict`` run there.
"""
import json
import numbers
import sys
import time

import numpy as np

from .. import _strata
from .. import data as _data
from .. import distribute as _distribute
from .. import errors as _errors
from .. import tape as _tape
from . import callbacks as _callbacks
from . import saving as _saving
from . import layers as _layers
from . import losses as _losses
from . import metrics as _metrics
from . import optimizers as _optimizers
from . import utils as _utils


def _features(x, what):
    """x as float32 rows (examples, features), C order."""
    if isinstance(x, _data.Dataset):
        raise TypeError("%s: pass the dataset as `x` alone" % what)
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise TypeError("%s: `x` must hold numbers, got dtype %s" % (what, a.dtype))
    if a.ndim == 0:
        raise ValueError("%s: `x` must have a batch dimension, got a scalar" % what)
    a = a.reshape(len(a), -1) if a.ndim != 2 else a
    if not np.all(np.isfinite(a)):
        raise ValueError("%s: `x` holds NaN or infinite values" % what)
    return np.ascontiguousarray(a, dtype=np.float32)


def _labels(y, what, n):
    if y is None:
        raise ValueError("%s: labels `y` are required" % what)
    a = np.asarray(y)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a.reshape(-1)
    if a.ndim == 2:
        a = a.argmax(axis=1)  # one-hot labels
    if a.ndim != 1:
        raise ValueError("%s: `y` must be 1-D (one label per example), got shape %s"
                         % (what, a.shape))
    if len(a) != n:
        raise ValueError("%s: Data cardinality is ambiguous: x sizes: %d, y sizes: %d. "
                         "Make sure all arrays contain the same number of samples."
                         % (what, n, len(a)))
    if not np.issubdtype(a.dtype, np.integer):
        if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a)) \
                or np.any(a != np.round(a)):
            raise ValueError("%s: `y` must hold integer class labels" % what)
    if len(a) and a.min() < 0:
        raise ValueError("%s: `y` holds a negative label (%d)" % (what, int(a.min())))
    return np.ascontiguousarray(a, dtype=np.int32)


def _ids(x, what, embedding):
    """x as int64 rows of ids (examples, input_length), C order, each id in
    [0, input_dim) as Keras's Embedding requires."""
    if isinstance(x, _data.Dataset):
        raise TypeError("%s: pass the dataset as `x` alone" % what)
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise TypeError("%s: `x` must hold integer ids, got dtype %s" % (what, a.dtype))
    if a.ndim == 1 and embedding["length"] == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2 or a.shape[1] != embedding["length"]:
        raise ValueError("%s: `x` must have shape (examples, %d) (the Embedding's "
                         "input_length), got %s" % (what, embedding["length"], a.shape))
    if not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise ValueError("%s: `x` must hold integer ids" % what)
    a = np.ascontiguousarray(a, dtype=np.int64)
    bad = (a < 0) | (a >= embedding["input_dim"])
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise _errors.InvalidArgumentError(
            "%s: indices[%d,%d] = %d is not in [0, %d)"
            % (what, i, j, int(a[i, j]), embedding["input_dim"]))
    return a


def _positive(what, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError("%s: `%s` must be a positive integer, got %r" % (what, name, value))
    return int(value)


class _Progbar:
    """Keras's progress display for fit.

    verbose=1: "Epoch 3/10", then the bar of the epoch, redrawn in place
    ("\r") while it trains where the output is a terminal, and ended by
    "469/469 [==============================] - 2s 4ms/step - loss: ...";
    verbose=2: one line per epoch, "469/469 - 2s - loss: ... - 2s/epoch -
    4ms/step"; verbose=0: nothing."""

    WIDTH = 30

    def __init__(self, epochs, verbose, stream=None):
        self.epochs = epochs
        self.verbose = verbose
        self.stream = stream or sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.dynamic = bool(isatty and isatty()) or "ipykernel" in sys.modules
        self._epoch = None
        self._start = None
        self._last_width = 0

    def _write(self, text):
        self.stream.write(text)
        self.stream.flush()

    def begin_epoch(self, epoch):
        """Epoch `epoch` (from 0) starts: its header line."""
        if self._epoch == epoch:
            return
        self._epoch = epoch
        self._start = time.monotonic()
        self._last_width = 0
        if self.verbose:
            self._write("Epoch %d/%d\n" % (epoch + 1, self.epochs))

    @staticmethod
    def _metrics(logs):
        return "".join(" - %s: %.4f" % (k, v) for k, v in logs.items())

    def _bar(self, step, steps):
        text = "%*d/%d [" % (len(str(steps)), step, steps)
        done = int(self.WIDTH * step / steps) if steps else self.WIDTH
        if done > 0:
            text += "=" * (done - 1)
            text += ">" if step < steps else "="
        return text + "." * (self.WIDTH - done) + "]"

    def update(self, epoch, step, steps, logs):
        """Within epoch `epoch`: `step` of `steps` done, running means."""
        self.begin_epoch(epoch)
        if self.verbose != 1 or not self.dynamic or steps <= 0 or step >= steps:
            return
        elapsed = time.monotonic() - self._start
        eta = elapsed / step * (steps - step) if step else 0.0
        eta_text = ("%d:%02d:%02d" % (eta // 3600, (eta % 3600) // 60, eta % 60)
                    if eta > 3600 else "%d:%02d" % (eta // 60, eta % 60)
                    if eta > 60 else "%ds" % eta)
        line = "%s - ETA: %s%s" % (self._bar(step, steps), eta_text, self._metrics(logs))
        pad = max(self._last_width - len(line), 0)
        self._last_width = len(line)
        self._write("\r" + line + " " * pad)

    @staticmethod
    def _per_step(seconds, steps):
        per_step = seconds / max(steps, 1)
        return ("%dms/step" % round(per_step * 1e3) if per_step >= 1e-3
                else "%dus/step" % round(per_step * 1e6))

    def end_epoch(self, epoch, steps, seconds, logs):
        """The epoch's final line (its figures, validation included)."""
        self.begin_epoch(epoch)
        if self.verbose == 1:
            line = "%s - %ds %s%s" % (self._bar(steps, steps), round(seconds),
                                       self._per_step(seconds, steps),
                                       self._metrics(logs))
            pad = max(self._last_width - len(line), 0)
            self._write(("\r" if self.dynamic else "") + line + " " * pad + "\n")
        elif self.verbose == 2:
            self._write("%d/%d - %ds%s - %ds/epoch - %s\n" % (
                steps, steps, round(seconds), self._metrics(logs), round(seconds),
                self._per_step(seconds, steps)))
        self._last_width = 0

    @classmethod
    def line(cls, steps, seconds, logs):
        """A finished bar: "313/313 [=====...] - 0s 1ms/step - loss: ..."."""
        bar = cls(1, 1)
        return "%s - %ds %s%s" % (bar._bar(steps, steps), round(seconds),
                                   cls._per_step(seconds, steps), cls._metrics(logs))


class Model:
    """keras.Model: functional (``Model(inputs, outputs)`` over layers called
    on ``keras.Input`` tensors), subclassed (a ``call`` composing layers,
    traced once on symbolic inputs into the same graph), and the base of
    Sequential. The model is one C++ layer graph: compile / fit / evaluate /
    predict run there."""

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

    # --- structure -------------------------------------------------------


    def _specs(self):
        specs = [layer._spec() for layer in self._layers]
        shape = getattr(self, "_input_shape", None)
        if specs and shape is not None and "input_shape" not in specs[0]:
            specs[0]["input_shape"] = list(shape)
        return specs

    # Keras's row optimizers for an Embedding's table, by the compiled one.
    _TABLE_OPTIMIZERS = {"sgd": "sgd", "adam": "lazy_adam", "adagrad": "adagrad"}

    def _split_embedding(self, opt):
        """(the layer specs after an Embedding and its pooling, the embedding's
        description) for a model starting with an Embedding, else (specs, None)."""
        specs = self._specs()
        for i, spec in enumerate(specs):
            pooling_ok = (i == 1 and specs[0]["type"] == "embedding")
            if (spec["type"] == "embedding" and i > 0) or \
                    (spec["type"] == "global_average_pooling1d" and not pooling_ok):
                raise ValueError("compile: %s (layer %d)"
                                 % ("an Embedding must be the model's first layer"
                                    if spec["type"] == "embedding" else
                                    "GlobalAveragePooling1D must come right after "
                                    "the model's first layer, an Embedding", i))
        if not specs or specs[0]["type"] != "embedding":
            return specs, None
        emb = specs[0]
        if "input_shape" not in emb:
            raise ValueError("compile: the Embedding needs `input_length` (or start the "
                             "model with keras.Input(shape=(input_length,)))")
        length = emb["input_shape"][0]
        if len(specs) < 2 or specs[1]["type"] not in ("flatten", "global_average_pooling1d"):
            raise ValueError("compile: an Embedding must be followed by Flatten or "
                             "GlobalAveragePooling1D")
        bag = specs[1]["type"] == "global_average_pooling1d"
        if not bag and length > 26:
            raise ValueError("compile: Embedding followed by Flatten takes at most 26 "
                             "ids per example (input_length %d); use "
                             "GlobalAveragePooling1D for longer inputs" % length)
        table_type = self._TABLE_OPTIMIZERS.get(opt._type)
        if table_type is None:
            raise ValueError("compile: an Embedding's rows train with SGD, Adam or "
                             "Adagrad; %s is not supported for them" % opt.name)
        table_opt = {"type": table_type, "learning_rate": float(opt.learning_rate)}
        if opt._type == "adam":
            table_opt.update(beta_1=opt.beta_1, beta_2=opt.beta_2, epsilon=opt.epsilon)
        elif opt._type == "adagrad":
            table_opt.update(epsilon=opt.epsilon,
                             initial_accumulator_value=opt.initial_accumulator_value)
        elif opt.momentum:
            raise ValueError("compile: an Embedding's rows train with plain SGD; "
                             "momentum %g is not supported for them" % opt.momentum)
        embedding = {"table": emb.get("name", "embedding"), "output_dim": emb["output_dim"],
                     "columns": 1 if bag else length,
                     "combiner": "mean" if bag else "concat", "init_scale": 0.05,
                     "optimizer": table_opt}
        rest = specs[2:]
        if not rest:
            raise ValueError("compile: the model needs a Dense layer after the "
                             "Embedding's %s" % ("pooling" if bag else "Flatten"))
        return rest, dict(embedding, input_dim=emb["input_dim"], length=length, bag=bag)

    @property
    def distribute_strategy(self):
        return self._strategy

    # --- compile ---------------------------------------------------------
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                weighted_metrics=None, run_eagerly=None, steps_per_execution=None,
                jit_compile=None, **kwargs):
        if kwargs:
            raise TypeError("compile: unexpected keyword argument(s) %s"
                            % ", ".join(sorted(kwargs)))
        if self._graph is None and not isinstance(self, Sequential):
            # A subclassed model not traced yet compiles when its first data
            # (fit, evaluate, predict) traces it, as Keras builds it then.
            if type(self).call is Model.call:
                self._ensure_built()  # raises: neither functional nor subclassed
            if loss is None:
                raise ValueError("compile: `loss` is required")
            _optimizers.get(optimizer)
            _losses.get(loss)
            self._deferred_compile = dict(optimizer=optimizer, loss=loss,
                                          metrics=metrics)
            return
        if not self._layers:
            raise ValueError("compile: the model has no layers")
        if loss is None:
            raise ValueError("compile: `loss` is required")
        if self._graph is not None and len(self._graph[2]) != 1:
            raise ValueError("compile: the model has %d outputs; the runtime trains "
                             "models with one output (and one loss)"
                             % len(self._graph[2]))
        # Compiling again keeps the weights (Keras's compile does not
        # reinitialize them): those a call built, fit trained, or set_weights
        # / load_weights put there, by layer (a Sequential that popped or
        # added layers keeps the others'); layers another compiled model holds
        # start from that model's weights (a feature extractor of a trained
        # model's layers), as Keras's shared variables would.
        carry = dict(getattr(self, "_carry", None) or {})
        self._carry = None
        if self._native is not None and self._pending_weights is None and (
                getattr(self, "_inference_only", False) or
                getattr(self, "_weights_touched", False)):
            carry.update(self._weights_by_layer())
        self._inference_only = False
        for layer in self._layers:
            owner = getattr(layer, "_owner", None)
            if owner is not None and owner is not self and owner._native is not None \
                    and layer.name not in carry:
                try:
                    carry[layer.name] = owner._layer_weights(layer.name)
                except Exception:  # noqa: BLE001 - the owner cannot give them
                    pass
        opt = _optimizers.get(optimizer)
        loss_name = _losses.get(loss)
        from_logits = _losses.from_logits(loss)
        if isinstance(loss, _losses.Loss) and \
                loss.reduction not in ("auto", "sum_over_batch_size"):
            raise ValueError("compile: the loss's `reduction` %r is not supported by "
                             "fit (the runtime's loss is the batch mean: 'auto')"
                             % (loss.reduction,))
        config = self._graph_config()
        if config is None:
            specs, embedding = self._split_embedding(opt)
            if embedding is None and specs[0].get("input_shape") is None:
                raise ValueError("compile: the first layer needs an `input_shape` (or "
                                 "start the model with keras.Input(shape=...))")
        else:
            specs, embedding = None, None
        self._metric_names = []
        self._py_metrics = []  # (shown name, metric computed here)
        native_metrics = []
        if isinstance(metrics, (str, _metrics.Metric)) or (
                isinstance(metrics, type) and issubclass(metrics, _metrics.Metric)):
            metrics = [metrics]  # one metric, as Keras takes it
        self._metric_order = []
        for m in metrics or []:
            native, shown, computed = _metrics.get(m)
            if shown not in self._metric_order:
                self._metric_order.append(shown)
            if computed is not None:
                if self._graph_config() is None and any(
                        isinstance(l, _layers.Embedding) for l in self._layers):
                    raise ValueError("compile: metric %r: a model with the embedding "
                                     "front end reports accuracy only" % (shown,))
                self._py_metrics.append((shown, computed))
            elif native not in native_metrics:
                native_metrics.append(native)
                self._metric_names.append(shown)
        native_embedding = None
        if embedding is not None:
            native_embedding = {k: embedding[k] for k in
                                ("table", "output_dim", "columns", "combiner",
                                 "init_scale", "optimizer")}
        if config is None:
            model = _strata.Model(specs, self.name, _utils._seed(),
                                  self._strategy._native, native_embedding)
        else:
            model = _strata.Model(json.dumps(config), self.name, _utils._seed(),
                                  self._strategy._native)
        model.compile(opt._spec(), loss_name, native_metrics, from_logits,
                      _losses.delta(loss))
        opt._bind(model)
        self._native = model
        self._config_json = config
        self._embedding = embedding
        self._optimizer = opt
        self.optimizer = opt
        self._loss = loss_name
        self.loss = loss
        self._compile_args = {"optimizer": opt.get_config(), "loss": loss_name,
                              "from_logits": from_logits,
                              "metrics": list(metrics or [])}
        if loss_name == "huber":
            self._compile_args["delta"] = _losses.delta(loss)
        self._fits = 0
        for layer in self._layers:
            owner = getattr(layer, "_owner", None)
            if owner is None or owner is self or owner._native is None:
                layer._owner = self  # else it stays with its first model
        if self._pending_weights is not None:
            # Weights loaded (or set) before compile.
            weights, self._pending_weights = self._pending_weights, None
            self.set_weights(weights)
        elif carry:
            self._restore_by_layer(carry)

    @property
    def metrics_names(self):
        return ["loss"] + list(getattr(self, "_metric_order", []))

    def _ordered(self, logs):
        """The logs in Keras's order: loss, the metrics as compiled, then
        their val_ entries, then anything else (a callback's "lr")."""
        names = self.metrics_names
        keys = [k for k in names if k in logs]
        keys += ["val_" + k for k in names if "val_" + k in logs]
        keys += [k for k in logs if k not in keys]
        return {k: logs[k] for k in keys}

    def _weights_by_layer(self):
        """{layer name: its weights in Keras's order} from the compiled model."""
        out = {}
        for (layer, _, _, _), w in zip(self._layout(), self.get_weights()):
            out.setdefault(layer, []).append(w)
        return out

    def _restore_by_layer(self, carry):
        """Sets each layer's weights from `carry` where the layer is there
        with the same shapes; the others keep their initial values."""
        layout = self._layout()
        current = self.get_weights()
        index = {}
        for i, (layer, _, shape, _) in enumerate(layout):
            index.setdefault(layer, []).append(i)
        for layer, slots in index.items():
            given = carry.get(layer)
            if given is None or len(given) != len(slots) or any(
                    tuple(np.shape(g)) != tuple(layout[i][2]) for g, i in zip(given, slots)):
                continue
            for g, i in zip(given, slots):
                current[i] = g
        self.set_weights(current)

    def _probabilities(self, feats):
        """The model's outputs for `feats`, as Keras's metrics see them (a
        from_logits model's logits: thresholds apply to them as given)."""
        return np.asarray(self._native.predict(feats, 1024), dtype=np.float64)

    def _computed_metrics(self, arrays, prefix=""):
        """The metrics computed here over (features, labels)."""
        if not self._py_metrics or arrays is None:
            return {}
        feats, labels = arrays
        probs = self._probabilities(feats)
        return {prefix + name: m.compute(labels, probs) for name, m in self._py_metrics}

    def _require(self, what, x=None, inference=False):
        if self._native is None and getattr(self, "_deferred_compile", None) \
                and x is not None:
            self._ensure_built(x)
            args, self._deferred_compile = self._deferred_compile, None
            self.compile(**args)
        if self._native is None and inference and self._layers and \
                not any(isinstance(l, _layers.Embedding) for l in self._layers) and \
                (self._graph is not None or isinstance(self, Sequential)):
            # Weights and predictions need no compile in Keras: the model is
            # built for inference (a later compile keeps these weights).
            self.compile(optimizer="sgd", loss="mse")
            self._inference_only = True
        if self._native is None:
            raise RuntimeError("You must compile your model before %s. Call "
                               "`model.compile(optimizer, loss)`." % what)
        return self._native

    # --- data ------------------------------------------------------------
    def _steps_datasets(self, feats, labels, shuffled, what, batch, steps, epochs):
        """steps_per_epoch: `epochs` native datasets of steps * batch examples
        each, read on through the data (a new pass, reshuffled when the
        dataset shuffles, when one ends), as Keras reads a repeated dataset."""
        n = len(feats)
        per_epoch = steps * batch
        total = per_epoch * epochs
        rng = np.random.default_rng(_utils._seed() + 7)
        passes = -(-total // n)
        order = np.concatenate([rng.permutation(n) if shuffled else np.arange(n)
                                for _ in range(passes)])[:total]
        return [self._native_dataset(feats[order[i:i + per_epoch]],
                                     labels[order[i:i + per_epoch]], shuffled, what)
                for i in range(0, total, per_epoch)]

    def _dataset(self, x, y, what, batch_size=None, shuffle=True, steps=None,
                 epochs=1):
        """(native dataset, batch size from the dataset or None, shuffled,
        examples); with `steps` (steps_per_epoch) a list of `epochs` native
        datasets of steps batches each."""
        if isinstance(x, _distribute.DistributedDataset):
            x = x._global_dataset()
        if isinstance(x, _data.Dataset):
            if y is not None:
                raise ValueError("%s: `y` argument is not supported when using "
                                 "dataset as input." % what)
            if x.labels is None:
                raise ValueError("%s: the dataset holds no labels" % what)
            if x.repeat_count is None and steps is None:
                raise ValueError("%s: the dataset repeats forever: pass "
                                 "steps_per_epoch (or drop .repeat())" % what)
            features = self._join_inputs(x.features, what) \
                if isinstance(x.features, dict) else x.features
            if self._embedding is not None:
                feats = _ids(features, what, self._embedding)
            else:
                feats = _features(features, what)
            labels = _labels(x.labels, what, len(feats))
            self._last_arrays = (feats, labels)
            if steps is not None:
                batch = batch_size or x.batch_size or 32
                return (self._steps_datasets(feats, labels, x.shuffled, what, batch,
                                             steps, epochs),
                        x.batch_size, x.shuffled, steps * batch)
            if x.repeat_count > 1:
                feats = np.concatenate([feats] * x.repeat_count)
                labels = np.concatenate([labels] * x.repeat_count)
            return (self._native_dataset(feats, labels, x.shuffled, what), x.batch_size,
                    x.shuffled, len(feats))
        if isinstance(x, tuple) and y is None and len(x) == 2:
            x, y = x
        if not what.startswith("fit"):  # fit joined its inputs already
            x = self._join_inputs(x, what)
        if self._embedding is not None:
            feats = _ids(x, what, self._embedding)
        else:
            feats = _features(x, what)
        labels = _labels(y, what, len(feats))
        self._last_arrays = (feats, labels)
        if steps is not None:
            batch = batch_size or 32
            return (self._steps_datasets(feats, labels, shuffle, what, batch, steps,
                                         epochs),
                    batch_size, shuffle, steps * batch)
        return (self._native_dataset(feats, labels, shuffle and what == "fit", what),
                batch_size, True, len(feats))

    def _native_dataset(self, feats, labels, shuffle, what):
        if self._embedding is None:
            return _strata.dataset_from_arrays(feats, labels)
        if len(labels) and labels.max() > 1:
            raise ValueError("%s: a model with an Embedding predicts one probability "
                             "(sigmoid, binary_crossentropy): labels must be 0 or 1, "
                             "got %d" % (what, int(labels.max())))
        if shuffle:
            # The ids are streamed from a file in its order each epoch: they are
            # shuffled once, here, with the model's seed.
            order = np.random.default_rng(_utils._seed()).permutation(len(labels))
            feats, labels = feats[order], labels[order]
        return _strata.dataset_from_ids(feats, labels, self._embedding["bag"])

    # --- fit -------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto",
            callbacks=None, validation_split=0.0, validation_data=None, shuffle=True,
            class_weight=None, sample_weight=None, initial_epoch=0, steps_per_epoch=None,
            validation_steps=None, validation_batch_size=None, validation_freq=1,
            max_queue_size=10, workers=1, use_multiprocessing=False):
        if isinstance(x, _utils.DatasetCreator):
            if steps_per_epoch is None:
                raise ValueError("fit: When using a `tf.keras.utils.experimental."
                                 "DatasetCreator`, `steps_per_epoch` argument must be "
                                 "provided in `Model.fit`.")
            x = self._strategy.distribute_datasets_from_function(x.dataset_fn)
        native = self._require("training/fitting", x)
        epochs = _positive("fit", "epochs", epochs)
        if not isinstance(x, (_data.Dataset, _distribute.DistributedDataset)) and \
                not (isinstance(x, tuple) and y is None):
            x = self._join_inputs(x, "fit")
        if isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3) \
                and self._multi_input:
            validation_data = (self._join_inputs(validation_data[0], "fit validation_data"),
                               validation_data[1])
        if batch_size is not None:
            batch_size = _positive("fit", "batch_size", batch_size)
        if class_weight is not None or sample_weight is not None:
            raise ValueError("fit: class_weight and sample_weight are not supported")
        if steps_per_epoch is not None:
            steps_per_epoch = _positive("fit", "steps_per_epoch", steps_per_epoch)
        if isinstance(initial_epoch, bool) or not isinstance(initial_epoch, int) \
                or not 0 <= initial_epoch < epochs:
            raise ValueError("fit: `initial_epoch` must be in [0, epochs), got %r"
                             % (initial_epoch,))
        validation_freq = _positive("fit", "validation_freq", validation_freq)
        if verbose == "auto":
            verbose = 1
        if verbose not in (0, 1, 2):
            raise ValueError("fit: `verbose` must be 'auto', 0, 1 or 2, got %r" % (verbose,))
        if not 0.0 <= validation_split < 1.0:
            raise ValueError("fit: `validation_split` must be in [0, 1), got %r"
                             % (validation_split,))
        if validation_split and validation_data is None:
            if isinstance(x, (_data.Dataset, _distribute.DistributedDataset)):
                raise ValueError("fit: `validation_split` is only supported for "
                                 "numpy arrays, not datasets")
            xa, ya = np.asarray(x), np.asarray(y)
            cut = int(len(xa) * (1.0 - validation_split))
            if cut < 1 or cut >= len(xa):
                raise ValueError("fit: validation_split=%r leaves no examples to train "
                                 "or validate on" % (validation_split,))
            x, y, validation_data = xa[:cut], ya[:cut], (xa[cut:], ya[cut:])
        local = not isinstance(self._strategy, _distribute._LocalCluster)
        # Under a cluster strategy the run is one Fit over one dataset: each
        # epoch then reads the same steps_per_epoch batches (reshuffled).
        train, ds_batch, _, n = self._dataset(
            x, y, "fit", batch_size, shuffle, steps=steps_per_epoch,
            epochs=(epochs - initial_epoch) if local else 1)
        train_arrays = self._last_arrays
        trains = train if isinstance(train, list) else None
        if trains is not None:
            train = trains[0]
        batch = batch_size or ds_batch or 32
        validation = None
        validation_arrays = None
        if validation_data is not None:
            if isinstance(validation_data, (_data.Dataset, _distribute.DistributedDataset)):
                validation = self._dataset(validation_data, None, "fit validation_data")[0]
            elif isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3):
                validation = self._dataset(validation_data[0], validation_data[1],
                                           "fit validation_data")[0]
            else:
                raise ValueError("fit: `validation_data` must be a (x, y) tuple or a "
                                 "dataset, got %r" % (type(validation_data),))
            validation_arrays = self._last_arrays

        history = _callbacks.History()
        cbs = list(callbacks or []) + [history]  # History last, as Keras
        steps = -(-n // batch)
        for cb in cbs:
            cb.set_model(self)
            cb.set_params({"epochs": epochs, "steps": steps, "verbose": verbose})
        self.stop_training = False
        for cb in cbs:
            cb.on_train_begin()
        for cb in cbs:  # BackupAndRestore: go on after the last backed-up epoch
            resume = getattr(cb, "_resume_epoch", None)
            if resume is not None and resume > initial_epoch:
                initial_epoch = min(resume, epochs)
        base_seed = self._fits * 100003 + 17
        self._fits += 1
        bar = _Progbar(epochs, verbose)

        def logs_of(e, evaluated, last):
            logs = {"loss": e["loss"]}
            for name in self._metric_names:
                logs[name] = e["accuracy"]
            # Metrics computed here need the epoch's weights: every epoch
            # in this process, the last one's after a cluster run.
            computed = local or last
            if computed:
                logs.update(self._computed_metrics(train_arrays))
            if evaluated:
                logs["val_loss"] = e["test_loss"]
                for name in self._metric_names:
                    logs["val_" + name] = e["test_accuracy"]
                if computed:
                    logs.update(self._computed_metrics(validation_arrays, "val_"))
            return self._ordered(logs)

        begun = set()
        ended = set()

        def begin(epoch):
            if epoch in begun:
                return
            begun.add(epoch)
            bar.begin_epoch(epoch)
            for cb in cbs:
                cb.on_epoch_begin(epoch)

        def report(epoch, e):
            if epoch in ended:
                return
            begin(epoch)
            ended.add(epoch)
            evaluated = validation is not None and e["evaluated"]
            logs = logs_of(e, evaluated, epoch == epochs - 1)
            bar.end_epoch(epoch, e["steps"], e["seconds"], logs)
            for cb in cbs:
                cb.on_epoch_end(epoch, logs)

        def run(first_epoch, n, val, seed):
            """One native Fit of `n` epochs, the first numbered
            `first_epoch`: its bar and epoch ends shown as they come."""
            def on_progress(epoch, _epochs, step, steps, loss, accuracy):
                epoch = first_epoch + epoch - 1
                if epoch in ended:
                    return
                logs = {"loss": loss}
                for name in self._metric_names:
                    logs[name] = accuracy
                begin(epoch)
                bar.update(epoch, step, steps, logs)

            def on_epoch(e):
                epoch = first_epoch + e["epoch"] - 1
                if epoch == epochs - 1 and self._py_metrics:
                    return  # reported once the trained weights are read back
                report(epoch, e)

            # The bar needs the progress; a local strategy's one-epoch Fit
            # returns its epoch as it ends, a cluster's are reported as each
            # ends. Without them the C++ Fit runs without the hooks.
            data = train if trains is None else trains[first_epoch - initial_epoch] \
                if local else trains[0]
            result = native.fit(data, n, batch, val, validation_freq, seed, 0,
                                on_progress if verbose == 1 else None,
                                on_epoch if not local else None)
            for i, e in enumerate(result):  # any epoch not shown as it ended
                report(first_epoch + i, dict(e))

        if local:
            # Epoch by epoch (a later Fit continues from the weights and
            # optimizer state reached), so callbacks run between epochs.
            for epoch in range(initial_epoch, epochs):
                begin(epoch)
                validate = validation is not None and (
                    (epoch + 1) % validation_freq == 0 or epoch + 1 == epochs)
                run(epoch, 1, validation if validate else None, base_seed + epoch)
                if self.stop_training:
                    break
        else:
            if callbacks and any(isinstance(cb, _callbacks.EarlyStopping) for cb in callbacks):
                print("fit: under %s the whole fit is one cluster run; EarlyStopping "
                      "sees its epochs as they end but cannot stop it"
                      % type(self._strategy).__name__, file=sys.stderr)
            if epochs > initial_epoch:
                run(initial_epoch, epochs - initial_epoch, validation, base_seed)
        self._weights_touched = True
        for cb in cbs:
            cb.on_train_end()
        self.history = history
        return history

    # --- evaluate / predict ---------------------------------------------
    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, max_queue_size=10, workers=1,
                 use_multiprocessing=False, return_dict=False):
        native = self._require("evaluating", x)
        if batch_size is not None:
            batch_size = _positive("evaluate", "batch_size", batch_size)
        data, ds_batch, _, n = self._dataset(x, y, "evaluate", batch_size)
        batch = batch_size or ds_batch or 32
        start = time.monotonic()
        loss, accuracy, _ = native.evaluate(data, max(batch, 1024))
        logs = {"loss": loss}
        for name in self._metric_names:
            logs[name] = accuracy
        logs.update(self._computed_metrics(self._last_arrays))
        logs = self._ordered(logs)
        if verbose == "auto" or verbose:
            print(_Progbar.line(-(-n // batch), time.monotonic() - start, logs))
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       reset_metrics=True, return_dict=False):
        """One optimizer step on the batch (x, y); returns its loss and
        metrics as Keras does. In-process strategies only (a cluster
        strategy's fit is a whole cluster run)."""
        if isinstance(self._strategy, _distribute._LocalCluster):
            raise ValueError("train_on_batch: under %s each fit is a cluster run; use "
                             "fit" % type(self._strategy).__name__)
        if sample_weight is not None or class_weight is not None:
            raise ValueError("train_on_batch: sample_weight and class_weight are not "
                             "supported")
        native = self._require("training", x)
        data, _, _, n = self._dataset(x, y, "train_on_batch", shuffle=False)
        # One step on the whole batch; a fixed seed (the order inside one
        # batch changes only the summation order), so equal models step alike.
        [e] = native.fit(data, 1, max(n, 1), None, 1, 17, 0, None, None)
        self._weights_touched = True
        logs = {"loss": e["loss"]}
        for name in self._metric_names:
            logs[name] = e["accuracy"]
        logs.update(self._computed_metrics(self._last_arrays))
        return self._logs_out(self._ordered(logs), return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, reset_metrics=True,
                      return_dict=False):
        """Loss and metrics on the batch (x, y), with the current weights."""
        return self.evaluate(x, y, batch_size=None, verbose=0, return_dict=return_dict)

    def predict_on_batch(self, x):
        return self.predict(x, verbose=0)

    @staticmethod
    def _logs_out(logs, return_dict):
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None,
                max_queue_size=10, workers=1, use_multiprocessing=False):
        native = self._require("predicting", x, inference=True)
        if batch_size is not None:
            batch_size = _positive("predict", "batch_size", batch_size)
        if isinstance(x, _distribute.DistributedDataset):
            x = x.dataset
        if isinstance(x, _data.Dataset):
            x = x.features
        x = self._join_inputs(x, "predict")
        if self._embedding is not None:
            ids = _ids(x, "predict", self._embedding)
            data = _strata.dataset_from_ids(ids, np.zeros(len(ids), np.int32),
                                            self._embedding["bag"])
            return native.predict_dataset(data, max(batch_size or 32, 1024))
        feats = _features(x, "predict")
        if feats.shape[1] != native.num_features:
            raise ValueError("predict: Input has %d features per example; the model "
                             "expects %d" % (feats.shape[1], native.num_features))
        return native.predict(feats, max(batch_size or 32, 1024))

    def __call__(self, x, training=None, mask=None):
        """The model's outputs for `x` (arrays), as predict. A model not
        compiled yet is built and its weights initialized first (Keras builds
        on the first call); compile then keeps those weights."""
        if _layers._flatten_tensors(x) is not None:
            raise TypeError("%s: calling a model on symbolic tensors (a nested "
                            "model) is not supported; call its layers on the "
                            "tensors instead" % self.name)
        if self._native is None and getattr(self, "_deferred_compile", None):
            self._require("predicting", x)
        if self._native is None:
            self._ensure_built(x)
            self.compile(optimizer="sgd", loss="mse")
            self._inference_only = True
        out = self.predict(x, verbose=0)
        if _tape.recording():
            # Inside a GradientTape: the output remembers the batch, for the
            # gradient of a loss on it.
            joined = self._join_inputs(x, "call")
            return _tape.model_output(out, self, _features(joined, "call"))
        return out

    @property
    def trainable_variables(self):
        """The trainable variables (for tape.gradient and apply_gradients)."""
        return [_tape.Variable(self, l, n, sh, t) for l, n, sh, t in self._layout() if t]

    @property
    def non_trainable_variables(self):
        return [_tape.Variable(self, l, n, sh, t) for l, n, sh, t in self._layout()
                if not t]

    @property
    def variables(self):
        return [_tape.Variable(self, l, n, sh, t) for l, n, sh, t in self._layout()]

    @property
    def losses(self):
        """Keras's added losses: none (kernel regularizers are part of the
        runtime's loss)."""
        return []

    def _layer_weights(self, layer_name):
        layout = self._layout()
        return [w for w, (l, _, _, _) in zip(self.get_weights(), layout)
                if l == layer_name]

    def _set_layer_weights(self, layer_name, weights):
        layout = self._layout()
        current = self.get_weights()
        slots = [i for i, (l, _, _, _) in enumerate(layout) if l == layer_name]
        if len(weights) != len(slots):
            raise ValueError("%s.set_weights: the layer has %d weights, the provided "
                             "list holds %d" % (layer_name, len(slots), len(weights)))
        for i, w in zip(slots, weights):
            current[i] = w
        self.set_weights(current)

    # --- weights ---------------------------------------------------------
    def _keras_config(self):
        """The Keras config of the model (every layer has one), or None for
        the embedding front end."""
        config = self._graph_config()
        if config is None and isinstance(self, Sequential) and \
                not any(isinstance(l, _layers.Embedding) for l in self._layers):
            config = self._sequential_config()
        return config

    def _info(self):
        config = self._keras_config()
        if config is None:
            return None
        return _strata.keras_graph_info(json.dumps(config))

    def _layout(self):
        """[(layer name, weight name, shape, trainable)] in Keras's order:
        per layer, its trainable weights, then its non-trainable ones."""
        info = self._info()
        if info is None:  # the embedding front end: the dense layers' weights
            native = self._require("reading weights")
            return [tuple(n.split("/", 1)) + (tuple(sh), True) for n, sh in
                    zip(native.weight_names(), native.weight_shapes())]
        out = []
        for layer in info["layers"]:
            ws = layer["weights"]
            for trainable in (True, False):
                out += [(layer["name"], w, tuple(sh), trainable)
                        for w, sh, t in ws if t == trainable]
        return out

    def get_weights(self):
        native = self._require("reading weights", inference=True)
        values = dict(zip(native.weight_names(), native.get_weights()))
        values.update(zip(native.state_names(), native.get_state()))
        return [values["%s/%s" % (l, w)] for l, w, _, _ in self._layout()]

    def set_weights(self, weights):
        native = self._require("setting weights", inference=True)
        layout = self._layout()
        weights = list(weights)
        if len(weights) != len(layout):
            raise ValueError("set_weights: You called `set_weights(weights)` on a model "
                             "with %d weights, but the provided list holds %d"
                             % (len(layout), len(weights)))
        values = {}
        for i, (w, (layer, name, shape, _)) in enumerate(zip(weights, layout)):
            a = np.asarray(w)
            if tuple(a.shape) != tuple(shape):
                raise ValueError("set_weights: weight %d (%s/%s) has shape %s; the "
                                 "model expects %s" % (i, layer, name, tuple(a.shape),
                                                       tuple(shape)))
            values["%s/%s" % (layer, name)] = np.ascontiguousarray(a, dtype=np.float32)
        params = [values[n] for n in native.weight_names()]
        state = [values[n] for n in native.state_names()]
        native.set_weights(params)
        if state:
            native.set_state(state)
        self._weights_touched = True

    @property
    def weights(self):
        return self.get_weights()

    @property
    def trainable_weights(self):
        return [w for w, (_, _, _, t) in zip(self.get_weights(), self._layout()) if t]

    @property
    def non_trainable_weights(self):
        return [w for w, (_, _, _, t) in zip(self.get_weights(), self._layout())
                if not t]

    def count_params(self):
        if self._native is None and self._keras_config() is None:
            self._require("counting")
        return int(sum(int(np.prod(sh)) for _, _, sh, _ in self._layout()))

    def save_weights(self, filepath, overwrite=True, save_format=None, options=None):
        """The weights: Keras's weights file (layers/NAME/vars/I datasets)
        for a name ending in .h5 (.weights.h5), else a numpy .npz archive
        (names as keys, in order) at that exact path; a checkpoint prefix
        (any name but .npz) is also recorded in its directory's "checkpoint"
        index for tf.train.latest_checkpoint."""
        import os
        self._require("saving weights", inference=True)
        path = str(filepath)
        if not overwrite and os.path.exists(path):
            raise FileExistsError(path)
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        if path.endswith(".h5") or save_format == "h5":
            _saving.write_weights_h5(path, self._layout(), self.get_weights())
            return
        names = ["%s/%s" % (l, w) for l, w, _, _ in self._layout()]
        with open(path, "wb") as f:
            np.savez(f, **{"%03d:%s" % (i, n): w for i, (n, w) in
                           enumerate(zip(names, self.get_weights()))})
        if not path.endswith(".npz"):
            # A checkpoint prefix (TensorFlow's format names no file): its
            # directory's index, for tf.train.latest_checkpoint(dir).
            _saving.note_checkpoint(path)

    def load_weights(self, filepath, skip_mismatch=False, by_name=False, options=None):
        path = str(filepath)
        if path.endswith(".h5"):
            weights = _saving.read_weights_h5(path, self._layout())
        else:
            names = ["%s/%s" % (l, w) for l, w, _, _ in self._layout()]
            with np.load(path) as archive:
                keys = sorted(archive.files)
                held = [k.split(":", 1)[1] for k in keys]
                # By position, as Keras loads (set_weights checks each shape).
                if len(held) != len(names):
                    raise ValueError("load_weights: %s holds %d weights (%s); the "
                                     "model has %d (%s)" % (filepath, len(held), held,
                                                            len(names), names))
                weights = [archive[k] for k in keys]
        if self._native is None:
            self._pending_weights = weights  # set at compile
        else:
            self.set_weights(weights)

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
