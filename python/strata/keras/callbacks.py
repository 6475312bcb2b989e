"""strata.keras.callbacks: History, EarlyStopping, ModelCheckpoint,
LambdaCallback, TensorBoard. Under OneDeviceStrategy and MirroredStrategy
``fit`` trains epoch by epoch in C++ and calls them after each; a cluster
strategy's fit is one cluster run, whose epochs they see as the
coordinator reports each ended (so they can record and save, but not stop
it early)."""
import os

import numpy as np

from . import tensorboard as _tensorboard


class Callback:
    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass


class History(Callback):
    """fit's return value: .history maps each metric to its list per epoch
    ("loss", "accuracy", "val_loss", "val_accuracy"); .epoch lists them."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []
        self.history = {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, **kwargs):
        super().__init__()
        for name, fn in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                         ("on_train_begin", on_train_begin), ("on_train_end", on_train_end)):
            if fn is not None:
                setattr(self, name, fn)


def _better(mode, monitor):
    if mode == "auto":
        mode = "max" if "acc" in monitor else "min"
    if mode not in ("min", "max"):
        raise ValueError("mode must be 'auto', 'min' or 'max', got %r" % (mode,))
    return (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)


class EarlyStopping(Callback):
    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0,
                 mode="auto", baseline=None, restore_best_weights=False,
                 start_from_epoch=0):
        super().__init__()
        self.monitor = monitor
        self.min_delta = abs(min_delta)
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch
        self._mode = mode
        self._better = _better(mode, monitor)
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = self.baseline
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or epoch < self.start_from_epoch:
            return
        if self.best is None or self._better(
                value, self.best + (-self.min_delta if self._better(0, 1) else
                                    self.min_delta)):
            self.best = value
            self.best_epoch = epoch
            self.wait = 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print("Epoch %d: early stopping" % (self.stopped_epoch + 1))


class ModelCheckpoint(Callback):
    """Saves the weights (save_weights) after each epoch, or only when
    `monitor` improved with save_best_only. `filepath` may hold
    {epoch} and the logs' keys, formatted as Keras does."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False,
                 save_weights_only=True, mode="auto", save_freq="epoch", **kwargs):
        super().__init__()
        if save_freq != "epoch":
            raise ValueError("ModelCheckpoint: only save_freq='epoch' is supported")
        self.filepath = str(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self._better = _better(mode, monitor)
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.save_best_only:
            value = logs.get(self.monitor)
            if value is None:
                return
            if self.best is not None and not self._better(value, self.best):
                return
            self.best = value
        path = self.filepath.format(epoch=epoch + 1, **logs)
        self.model.save_weights(path)
        if self.verbose > 0:
            print("Epoch %d: saving model to %s" % (epoch + 1, path))


class TensorBoard(Callback):
    """Keras's TensorBoard callback for the epoch scalars: after each epoch,
    log_dir/train gets "epoch_loss", "epoch_<metric>", and log_dir/validation
    the validation figures under the same tags (as Keras writes them), in
    TensorBoard's event-file format (`tensorboard --logdir LOG_DIR`).
    Histograms, images, graphs and profiling are not written."""

    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True,
                 write_images=False, write_steps_per_second=False, update_freq="epoch",
                 profile_batch=0, embeddings_freq=0, embeddings_metadata=None, **kwargs):
        super().__init__()
        if kwargs:
            raise TypeError("TensorBoard: unexpected keyword argument(s) %s"
                            % ", ".join(sorted(kwargs)))
        if update_freq not in ("epoch", "batch") and not isinstance(update_freq, int):
            raise ValueError("TensorBoard: `update_freq` must be 'epoch', 'batch' or "
                             "an integer, got %r" % (update_freq,))
        self.log_dir = os.fspath(log_dir)
        self._writers = {}

    def _writer(self, name):
        if name not in self._writers:
            self._writers[name] = _tensorboard.EventFileWriter(
                os.path.join(self.log_dir, name))
        return self._writers[name]

    def on_epoch_end(self, epoch, logs=None):
        train, validation = {}, {}
        for key, value in (logs or {}).items():
            if key.startswith("val_"):
                validation["epoch_" + key[4:]] = value
            else:
                train["epoch_" + key] = value
        if train:
            self._writer("train").scalars(epoch, train)
        if validation:
            self._writer("validation").scalars(epoch, validation)

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
