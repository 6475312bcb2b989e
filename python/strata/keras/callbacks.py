"""strata.keras.callbacks: History, EarlyStopping, ModelCheckpoint,
LambdaCallback. Under OneDeviceStrategy and MirroredStrategy ``fit`` trains
epoch by epoch in C++ and calls them after each; a cluster strategy's fit
is one cluster run, after which they see each epoch's logs in turn (so
they can record and save, but not stop it early)."""
import numpy as np


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
