"""strata.keras.models (models_training): fit, evaluate, predict, the
batch forms (train_on_batch, test_on_batch, predict_on_batch) and calling a
model, with Keras's progress display (_Progbar, which strata.keras.models
re-exports)."""
import sys
import time

import numpy as np

from .. import _strata
from .. import data as _data
from .. import distribute as _distribute
from .. import tape as _tape
from . import callbacks as _callbacks
from . import layers as _layers
from . import utils as _utils
from .models_data import _features, _ids, _positive


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


class _TrainingMixin:
    """keras.Model's fit / evaluate / predict, run by the compiled model."""

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
