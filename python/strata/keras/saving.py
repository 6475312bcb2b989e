"""strata.keras saving: Keras's model config JSON (to_json /
model_from_json), its .keras archive (save / load_model), its weights file
(.weights.h5), and the summary table."""
import datetime
import json
import os
import zipfile

import numpy as np

from . import layers as _layers

_KERAS_VERSION = "2.11.0"


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - the Makefile installs it
        raise ImportError("saving weights as .h5 requires h5py (Debian: "
                          "python3-h5py)") from None
    return h5py


# --- weights ---------------------------------------------------------------
def _write_h5(f, layout, weights):
    """Keras's layout: layers/<layer name>/vars/<i>, per layer in order."""
    f.create_group("vars")
    group = f.create_group("layers", track_order=True)
    # The layers in the model's order, for a model whose layers are named
    # otherwise (automatic names differ between sessions).
    group.attrs["layer_order"] = json.dumps(list(dict.fromkeys(l for l, _, _, _ in layout)))
    counts = {}
    for (layer, _, _, _), w in zip(layout, weights):
        vars_group = group.require_group(layer).require_group("vars")
        i = counts.get(layer, 0)
        counts[layer] = i + 1
        vars_group.create_dataset(str(i), data=np.asarray(w, dtype=np.float32))


def write_weights_h5(path, layout, weights):
    h5py = _h5py()
    with h5py.File(path, "w") as f:
        _write_h5(f, layout, weights)


def _read_h5(f, layout, where):
    if "layers" not in f:
        raise ValueError("load_weights: %s holds no 'layers' group (not a Keras "
                         "weights file)" % where)
    out = []
    counts = {}
    # The file's layers by name, or, when the model's layers are named
    # otherwise (automatic names differ between sessions), by position.
    model_layers = list(dict.fromkeys(l for l, _, _, _ in layout))
    rename = {}
    order = f["layers"].attrs.get("layer_order")
    if order is not None and not all(l in f["layers"] for l in model_layers):
        # Written here: matched by position in the writer's layer order
        # (a file from elsewhere is matched by name only).
        file_layers = [l for l in json.loads(order) if l in f["layers"]]
        if len(file_layers) == len(model_layers):
            rename = dict(zip(model_layers, file_layers))
    for layer, name, shape, _ in layout:
        i = counts.get(layer, 0)
        counts[layer] = i + 1
        key = "layers/%s/vars/%d" % (rename.get(layer, layer), i)
        if key not in f:
            raise ValueError("load_weights: %s has no weight %s (%s/%s)"
                             % (where, key, layer, name))
        a = np.asarray(f[key])
        if tuple(a.shape) != tuple(shape):
            raise ValueError("load_weights: %s: %s (%s/%s) has shape %s; the model "
                             "expects %s" % (where, key, layer, name, a.shape, shape))
        out.append(a)
    return out


def read_weights_h5(path, layout):
    h5py = _h5py()
    with h5py.File(path, "r") as f:
        return _read_h5(f, layout, path)


# --- configs ---------------------------------------------------------------
def _tensor_refs(call):
    """The (layer, node_index) of each tensor of an inbound node, in the
    tf.keras 2.x list form or Keras 3's {"args", "kwargs"}."""
    refs = []
    if isinstance(call, dict):
        def walk(v):
            if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
                h = v["config"]["keras_history"]
                refs.append((h[0], h[1]))
            elif isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)
        walk(call.get("args", []))
        return refs
    for ref in call:
        refs.append((ref[0], ref[1]))
    return refs


def model_from_config(config, custom_objects=None):
    """A model from its Keras config ({"class_name", "config"})."""
    from . import models as _models
    if not isinstance(config, dict) or "config" not in config:
        raise ValueError("model_from_config: expected {'class_name': ..., "
                         "'config': ...}, got %r" % (type(config).__name__,))
    kind = config.get("class_name")
    body = config["config"]
    if kind == "Sequential":
        entries = body["layers"] if isinstance(body, dict) else body
        model = _models.Sequential(name=body.get("name") if isinstance(body, dict)
                                   else None)
        for entry in entries:
            model.add(_layers.deserialize(entry))
        return model
    if kind not in ("Functional", "Model"):
        raise ValueError("model_from_config: Unknown model class %r (Sequential or "
                         "Functional)" % (kind,))
    built = {}    # layer name -> layer
    outputs = {}  # (layer name, node index) -> tensor
    pending = []
    for entry in body["layers"]:
        name = entry.get("name") or entry["config"]["name"]
        layer = _layers.deserialize(entry)
        layer.name = name
        built[name] = layer
        if isinstance(layer, _layers.InputLayer):
            outputs[(name, 0)] = layer.output
            continue
        for node, call in enumerate(entry.get("inbound_nodes", [])):
            pending.append((layer, node, _tensor_refs(call)))
    # Calls in dependency order (a shared layer's later calls may come later).
    while pending:
        progress = False
        rest = []
        for layer, node, refs in pending:
            if all(r in outputs for r in refs) and len(layer._inbound) == node:
                tensors = [outputs[r] for r in refs]
                outputs[(layer.name, node)] = layer(tensors if len(tensors) > 1
                                                    else tensors[0])
                progress = True
            else:
                rest.append((layer, node, refs))
        if not progress:
            missing = sorted({r for _, _, refs in rest for r in refs if r not in outputs})
            raise ValueError("model_from_config: the calls of %s read tensors no layer "
                             "produces: %s" % (sorted({l.name for l, _, _ in rest}),
                                               missing))
        pending = rest

    def tensors(refs):
        return [outputs[(r[0], r[1])] for r in refs]
    ins = tensors(body["input_layers"])
    outs = tensors(body["output_layers"])
    return _models.Model(inputs=ins if len(ins) > 1 else ins[0],
                         outputs=outs if len(outs) > 1 else outs[0],
                         name=body.get("name"))


def model_from_json(json_string, custom_objects=None):
    """keras.models.model_from_json: a model from to_json()'s JSON (tf.keras
    2.x or Keras 3)."""
    try:
        config = json.loads(json_string)
    except ValueError as e:
        raise ValueError("model_from_json: not valid JSON: %s" % e) from None
    return model_from_config(config)


# --- the .keras archive ----------------------------------------------------
def save_model(model, filepath, overwrite=True, save_format=None):
    path = os.fspath(filepath)
    if not (path.endswith(".keras") or save_format == "keras"):
        raise ValueError("save: only Keras's .keras format is written (got %r): "
                         "model.save('name.keras'); for the weights alone, "
                         "model.save_weights('name.weights.h5')" % (path,))
    if not overwrite and os.path.exists(path):
        raise FileExistsError(path)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    config = model._keras_config()
    if config is None:
        raise ValueError("save: a Sequential model starting with an Embedding (the "
                         "dynamic tables' front end) has no Keras config to save")
    if model._native is None:
        model._require("saving the model", inference=True)  # its weights
    entry = dict(config, keras_version=_KERAS_VERSION, backend="tensorflow")
    if model._native is not None and not getattr(model, "_inference_only", False):
        cc = dict(model._compile_args)
        # The optimizer as it is now (a learning rate set since compile).
        cc["optimizer"] = model.optimizer.get_config()
        cc["metrics"] = [
            m if isinstance(m, str) else
            dict({"class_name": type(m).__name__, "name": m.name},
                 **{k: getattr(m, k) for k in ("threshold", "k") if hasattr(m, k)})
            for m in cc["metrics"]]
        entry["compile_config"] = cc
    metadata = {"keras_version": _KERAS_VERSION, "saved_by": "strata",
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    h5py = _h5py()
    import io
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        if model._native is not None:
            _write_h5(f, model._layout(), model.get_weights())
            _write_optimizer(f, model)
        else:
            f.create_group("layers")
    # Written aside, then renamed: a failure leaves no half-written archive.
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w") as z:
        z.writestr("metadata.json", json.dumps(metadata))
        z.writestr("config.json", json.dumps(entry))
        z.writestr("model.weights.h5", buf.getvalue())
    os.replace(tmp, path)


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """keras.models.load_model for a .keras archive: the model, compiled as
    it was saved (when it was), with its weights."""
    from . import losses as _losses
    from . import optimizers as _optimizers
    path = os.fspath(filepath)
    if not zipfile.is_zipfile(path):
        raise ValueError("load_model: %s is not a .keras archive" % (path,))
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        if "config.json" not in names:
            raise ValueError("load_model: %s holds no config.json" % path)
        entry = json.loads(z.read("config.json"))
        weights_blob = z.read("model.weights.h5") if "model.weights.h5" in names else None
    model = model_from_config(entry)
    if weights_blob is not None:
        h5py = _h5py()
        import io
        with h5py.File(io.BytesIO(weights_blob), "r") as f:
            if len(f.get("layers", {})) or model._layout():
                model._pending_weights = _read_h5(f, model._layout(), path)
    cc = entry.get("compile_config")
    if compile and cc:
        opt = _optimizers.deserialize(cc["optimizer"])
        loss = cc["loss"]
        if cc.get("from_logits"):
            loss = _losses.get_class(loss)(from_logits=True)
        elif "delta" in cc:
            loss = _losses.get_class(loss)(delta=cc["delta"])
        from . import metrics as _metrics
        metrics = [m if isinstance(m, str) else _metrics.from_saved(m)
                   for m in cc.get("metrics") or []]
        model.compile(optimizer=opt, loss=loss, metrics=metrics or None)
        if weights_blob is not None:
            h5py = _h5py()
            import io
            with h5py.File(io.BytesIO(weights_blob), "r") as f:
                _read_optimizer(f, model, path)
    return model


# --- the optimizer's state ---------------------------------------------------
def _write_optimizer(f, model):
    """Keras's optimizer variables under optimizer/vars/I: iterations, the
    learning rate, then each trainable weight's slots (Keras's order: per
    weight, Adam's m then v); "slot_names" names the slots. A model trained
    on a cluster has its slots there: none are written."""
    try:
        iterations, slot_names, slots = model._native.get_optimizer_state()
    except Exception:  # noqa: BLE001 - FailedPrecondition after a cluster fit
        return
    by_name = dict(zip(model._native.weight_names(), slots))
    group = f.create_group("optimizer").create_group("vars", track_order=True)
    group.attrs["slot_names"] = json.dumps(list(slot_names))
    values = [np.asarray(iterations, dtype=np.int64),
              np.asarray(float(model.optimizer.learning_rate), dtype=np.float32)]
    for layer, name, shape, trainable in model._layout():
        if trainable:
            values += [np.asarray(s, dtype=np.float32).reshape(shape)
                       for s in by_name["%s/%s" % (layer, name)]]
    for i, v in enumerate(values):
        group.create_dataset(str(i), data=v)


def _read_optimizer(f, model, where):
    """Restores what _write_optimizer wrote, when the file holds it and the
    compiled optimizer has the same slots."""
    if "optimizer/vars" not in f:
        return
    group = f["optimizer/vars"]
    slot_names = json.loads(group.attrs.get("slot_names", "[]"))
    trainable = [(l, n, sh) for l, n, sh, t in model._layout() if t]
    want = 2 + len(trainable) * len(slot_names)
    if len(group) != want:
        raise ValueError("load_model: %s: the optimizer's state holds %d values; the "
                         "model's optimizer has %d" % (where, len(group), want))
    iterations = int(np.asarray(group["0"]))
    slots = {}
    i = 2
    for layer, name, shape in trainable:
        slots["%s/%s" % (layer, name)] = [
            np.asarray(group[str(i + k)], dtype=np.float32).reshape(-1)
            for k in range(len(slot_names))]
        i += len(slot_names)
    model._native.set_optimizer_state(
        iterations, slot_names, [slots[n] for n in model._native.weight_names()])


# --- summary ---------------------------------------------------------------
def _shape_text(shape):
    return "(None, %s)" % ", ".join(str(d) for d in shape) if shape else "(None,)"


def summary_text(model, info, line_length=None):
    from . import models as _models
    functional = not isinstance(model, _models.Sequential)
    width = line_length or (98 if functional else 65)
    cols = ([0.33, 0.55, 0.67, 1.0] if functional else [0.45, 0.85, 1.0])
    stops = [int(width * c) for c in cols]
    heads = (["Layer (type)", "Output Shape", "Param #", "Connected to"] if functional
             else ["Layer (type)", "Output Shape", "Param #"])

    def row(fields):
        line = ""
        for f, stop in zip(fields, stops):
            line = (line + " " + str(f))[:stop - 1].ljust(stop)
        return line.rstrip()

    lines = ['Model: "%s"' % model.name, "_" * width, row(heads), "=" * width]
    by_name = {l["name"]: l for l in info["layers"]}
    total = trainable = 0
    for layer in model._layers:
        if isinstance(layer, _layers.InputLayer):
            if functional:
                lines.append(row(["%s (InputLayer)" % layer.name,
                                  "[%s]" % _shape_text(layer.input_shape), 0, "[]"]))
                lines.append("")
            continue
        li = by_name.get(layer.name)
        if li is None:
            continue
        params = sum(int(np.prod(sh)) for _, sh, _ in li["weights"])
        total += params
        trainable += sum(int(np.prod(sh)) for _, sh, t in li["weights"] if t)
        fields = ["%s (%s)" % (layer.name, li["class_name"]),
                  _shape_text(li["output_shape"]), params]
        if functional:
            fields.append(", ".join("%s[%d][0]" % (t._keras_history[0].name,
                                                   t._keras_history[1])
                                    for call in layer._inbound for t in call) or "[]")
        lines.append(row(fields))
        lines.append("")
    lines += ["=" * width, "Total params: {:,}".format(total),
              "Trainable params: {:,}".format(trainable),
              "Non-trainable params: {:,}".format(total - trainable), "_" * width]
    return "\n".join(lines)


# --- tf.train's checkpoint index -----------------------------------------------
def note_checkpoint(path):
    """Records `path` as its directory's newest checkpoint (the "checkpoint"
    file of TensorFlow's format: model_checkpoint_path and
    all_model_checkpoint_paths, relative to the directory)."""
    directory, name = os.path.split(os.path.abspath(path))
    index = os.path.join(directory, "checkpoint")
    names = []
    if os.path.exists(index):
        for line in open(index):
            if line.startswith("all_model_checkpoint_paths:"):
                names.append(json.loads(line.split(":", 1)[1].strip()))
    names = [n for n in names if n != name] + [name]
    text = "model_checkpoint_path: %s\n" % json.dumps(name)
    text += "".join("all_model_checkpoint_paths: %s\n" % json.dumps(n) for n in names)
    with open(index + ".tmp", "w") as f:
        f.write(text)
    os.replace(index + ".tmp", index)


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """tf.train.latest_checkpoint: the newest checkpoint save_weights wrote
    into `checkpoint_dir` (its path), or None."""
    index = os.path.join(os.fspath(checkpoint_dir), latest_filename or "checkpoint")
    if not os.path.exists(index):
        return None
    for line in open(index):
        if line.startswith("model_checkpoint_path:"):
            name = json.loads(line.split(":", 1)[1].strip())
            path = os.path.join(os.fspath(checkpoint_dir), name)
            return path if os.path.exists(path) else None
    return None


# --- tf.train.Checkpoint ------------------------------------------------------
def write_checkpoint(model, path):
    """The model's weights and its optimizer's state in Keras's weights
    layout, at `path` exactly."""
    model._require("saving a checkpoint")
    h5py = _h5py()
    with h5py.File(path, "w") as f:
        _write_h5(f, model._layout(), model.get_weights())
        _write_optimizer(f, model)


def read_checkpoint(model, path):
    h5py = _h5py()
    with h5py.File(path, "r") as f:
        weights = _read_h5(f, model._layout(), path)
        if model._native is None:
            model._pending_weights = weights
            return
        model.set_weights(weights)
        _read_optimizer(f, model, path)
