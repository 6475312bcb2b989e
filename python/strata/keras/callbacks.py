"""strata.keras.callbacks: History, EarlyStopping, ModelCheckpoint,
LambdaCallback, TensorBoard, LearningRateScheduler, ReduceLROnPlateau,
CSVLogger, TerminateOnNaN, ProgbarLogger, BackupAndRestore. Under OneDeviceStrategy and MirroredStrategy
``fit`` trains epoch by epoch in C++ and calls them after each; a cluster
strategy's fit is one cluster run, whose epochs they see as the
coordinator reports each ended (so they can record and save, but not stop
it early)."""
import csv
import inspect
import json
import math
import os
import shutil

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

    # The runtime trains whole epochs in C++: there are no batch-level calls.
    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
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
        if self.wait >= self.patience and epoch > 0:  # Keras's rule
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
                 save_weights_only=None, mode="auto", save_freq="epoch", **kwargs):
        super().__init__()
        if save_freq != "epoch":
            raise ValueError("ModelCheckpoint: only save_freq='epoch' is supported")
        self.filepath = str(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        if save_weights_only is None:
            # Keras's default is the whole model: a .keras path gets it;
            # any other path (a prefix, .weights.h5, .npz) the weights.
            save_weights_only = not self.filepath.endswith(".keras")
        self.save_weights_only = save_weights_only
        if not save_weights_only and not self.filepath.endswith(".keras"):
            raise ValueError("ModelCheckpoint: a whole model saves to a .keras file "
                             "(filepath %r); or pass save_weights_only=True"
                             % (self.filepath,))
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
        if self.save_weights_only:
            self.model.save_weights(path)
        else:
            self.model.save(path)
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


def _lr(model):
    return float(model.optimizer.learning_rate)


class LearningRateScheduler(Callback):
    """Sets the learning rate before each epoch to schedule(epoch, lr) (or
    schedule(epoch)); the logs get "lr"."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        if not callable(schedule):
            raise ValueError("LearningRateScheduler: `schedule` must be callable")
        self.schedule = schedule
        self.verbose = verbose
        try:
            self._two = len(inspect.signature(schedule).parameters) >= 2
        except (TypeError, ValueError):
            self._two = True

    def on_epoch_begin(self, epoch, logs=None):
        lr = _lr(self.model)
        new = self.schedule(epoch, lr) if self._two else self.schedule(epoch)
        new = float(new)
        if not math.isfinite(new) or new <= 0:
            raise ValueError("LearningRateScheduler: the schedule returned %r for "
                             "epoch %d; a learning rate is finite and > 0" % (new, epoch))
        self.model.optimizer.learning_rate = new
        if self.verbose > 0:
            print("\nEpoch %d: LearningRateScheduler setting learning rate to %s."
                  % (epoch + 1, new))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _lr(self.model)


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by `factor` when `monitor` has not
    improved by min_delta for `patience` epochs (Keras's arguments)."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0,
                 mode="auto", min_delta=1e-4, cooldown=0, min_lr=0.0, **kwargs):
        super().__init__()
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau does not support a factor >= 1.0. "
                             "Received factor=%r" % (factor,))
        self.monitor, self.factor, self.patience = monitor, float(factor), patience
        self.verbose, self.min_delta, self.cooldown = verbose, min_delta, cooldown
        self.min_lr = float(min_lr)
        self._better = _better(mode, monitor)
        self._min_mode = self._better(0, 1)

    def on_train_begin(self, logs=None):
        self.best = None
        self.wait = 0
        self.cooldown_counter = 0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        logs["lr"] = _lr(self.model)
        value = logs.get(self.monitor)
        if value is None:
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        delta = -self.min_delta if self._min_mode else self.min_delta
        if self.best is None or self._better(value, self.best + delta):
            self.best = value
            self.wait = 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old = _lr(self.model)
                if old > self.min_lr:
                    new = max(old * self.factor, self.min_lr)
                    self.model.optimizer.learning_rate = new
                    if self.verbose > 0:
                        print("\nEpoch %d: ReduceLROnPlateau reducing learning rate "
                              "to %s." % (epoch + 1, new))
                    self.cooldown_counter = self.cooldown
                    self.wait = 0


class CSVLogger(Callback):
    """One CSV row per epoch: "epoch" and the logs' keys, sorted."""

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.sep = separator
        self.append = append
        self._keys = None

    def on_train_begin(self, logs=None):
        self._keys = None
        self._append_header = not (self.append and os.path.exists(self.filename)
                                   and os.path.getsize(self.filename) > 0)
        self._file = open(self.filename, "a" if self.append else "w", newline="")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._keys is None:
            self._keys = sorted(logs)
            self._writer = csv.DictWriter(self._file, fieldnames=["epoch"] + self._keys,
                                          delimiter=self.sep)
            if self._append_header:
                self._writer.writeheader()
        self._writer.writerow(dict({k: logs.get(k, "NA") for k in self._keys},
                                   epoch=epoch))
        self._file.flush()

    def on_train_end(self, logs=None):
        self._file.close()


class TerminateOnNaN(Callback):
    """Stops training when the loss is NaN or infinite (checked at the end
    of each epoch: the runtime's steps refuse a non-finite gradient)."""

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            print("Epoch %d: Invalid loss, terminating training" % (epoch + 1))
            self.model.stop_training = True


class ProgbarLogger(Callback):
    """Accepted for Keras programs that pass it: fit draws its progress bar
    itself (verbose=1)."""

    def __init__(self, count_mode="steps", stateful_metrics=None):
        super().__init__()


class BackupAndRestore(Callback):
    """Keras's fault-tolerance callback: after each epoch the model's
    weights (and the epoch reached) are written to `backup_dir`; a fit
    started again after its process was killed restores them and goes on
    from the next epoch. The backup is deleted when fit ends normally
    (delete_checkpoint=True)."""

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True,
                 save_before_preemption=False):
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore: empty `backup_dir` is not allowed")
        if save_freq != "epoch":
            raise ValueError("BackupAndRestore: only save_freq='epoch' is supported")
        self.backup_dir = os.fspath(backup_dir)
        self.delete_checkpoint = delete_checkpoint
        self._resume_epoch = None

    def _latest(self):
        """The newest complete backup's directory, or None."""
        pointer = os.path.join(self.backup_dir, "latest")
        if not os.path.exists(pointer):
            return None
        with open(pointer) as f:
            path = os.path.join(self.backup_dir, f.read().strip())
        return path if os.path.isdir(path) else None

    def on_train_begin(self, logs=None):
        self._resume_epoch = None
        latest = self._latest()
        if latest is None:
            return
        with open(os.path.join(latest, "training_state.json")) as f:
            state = json.load(f)
        self.model.load_weights(os.path.join(latest, "model.weights.h5"))
        self.model.optimizer.learning_rate = state["learning_rate"]
        self._resume_epoch = state["epoch"] + 1

    def on_epoch_end(self, epoch, logs=None):
        # Each epoch's backup is a directory of its own, complete before the
        # "latest" pointer names it (replaced atomically): a kill at any
        # point leaves the previous backup whole.
        os.makedirs(self.backup_dir, exist_ok=True)
        name = "epoch-%d" % epoch
        path = os.path.join(self.backup_dir, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        self.model.save_weights(os.path.join(path, "model.weights.h5"))
        with open(os.path.join(path, "training_state.json"), "w") as f:
            json.dump({"epoch": epoch, "learning_rate": _lr(self.model)}, f)
        previous = self._latest()
        pointer = os.path.join(self.backup_dir, "latest")
        with open(pointer + ".tmp", "w") as f:
            f.write(name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(pointer + ".tmp", pointer)
        if previous is not None and os.path.abspath(previous) != os.path.abspath(path):
            shutil.rmtree(previous, ignore_errors=True)

    def on_train_end(self, logs=None):
        if self.delete_checkpoint:  # the fit ended (early stopping too)
            shutil.rmtree(self.backup_dir, ignore_errors=True)
