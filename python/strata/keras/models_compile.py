"""strata.keras.models (models_compile): compile, which builds the model's
C++ graph (or the short-list path's layers and its embedding front end),
and what a compiled model reports: its metrics and logs, and the compile a
call that needs the model makes first (_require)."""
import json

import numpy as np

from .. import _strata
from . import layers as _layers
from . import losses as _losses
from . import metrics as _metrics
from . import optimizers as _optimizers
from . import utils as _utils


class _CompileMixin:
    """keras.Model's compile (and the short-list path's layer specs)."""

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

    # --- compile ---------------------------------------------------------
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                weighted_metrics=None, run_eagerly=None, steps_per_execution=None,
                jit_compile=None, **kwargs):
        from .models import Model, Sequential  # late: models imports this module
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
        from .models import Sequential  # late: models imports this module
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
