"""strata.keras.models (models_weights): a model's variables and weights
(in Keras's order, by layer), read from and written to the compiled model,
and their files (save_weights / load_weights)."""
import json

import numpy as np

from .. import _strata
from .. import tape as _tape
from . import saving as _saving


class _WeightsMixin:
    """keras.Model's variables and weights, held by the compiled model."""

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
