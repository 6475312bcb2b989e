"""Keras's callbacks that change or record the run: the learning rate read
and set between epochs (LearningRateScheduler, ReduceLROnPlateau, a custom
Callback), CSVLogger, TerminateOnNaN, ModelCheckpoint of whole models, and
BackupAndRestore resuming a fit killed with SIGKILL."""
import csv
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import strata as tf

import _helpers


def toy(n=1000, seed=0):
    return _helpers.toy(n, seed)


def model_with(optimizer=None):
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu",
                                                       input_shape=(2,)),
                                 tf.keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer or tf.keras.optimizers.SGD(0.1),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def test_learning_rate_is_read_and_set_between_epochs():
    model = model_with()
    lr = model.optimizer.learning_rate
    assert float(lr) == pytest.approx(0.1) and lr.numpy() == np.float32(0.1)
    seen = []

    class Halve(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate))
            self.model.optimizer.learning_rate = \
                self.model.optimizer.learning_rate.numpy() / 2

    model.fit(*toy(), epochs=3, verbose=0, callbacks=[Halve()])
    assert seen == pytest.approx([0.1, 0.05, 0.025])
    assert model._native.learning_rate == pytest.approx(0.0125)
    with pytest.raises(ValueError, match="`learning_rate`"):
        model.optimizer.learning_rate = -1.0
    model.optimizer.learning_rate.assign(0.2)
    assert model._native.learning_rate == pytest.approx(0.2)
    # A rate of ~0 freezes the weights: it took effect in the runtime.
    model.optimizer.learning_rate = 1e-30
    before = model.get_weights()
    model.fit(*toy(), epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_learning_rate_scheduler_and_plateau(strategy):
    s = (tf.distribute.OneDeviceStrategy("/cpu:0") if strategy == "one_device"
         else tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    with s.scope():
        model = model_with()
    sched = tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 * 0.5 ** epoch)
    h = model.fit(*toy(), epochs=3, verbose=0, callbacks=[sched])
    assert h.history["lr"] == pytest.approx([0.1, 0.05, 0.025])
    plateau = tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5,
                                                   patience=1, min_delta=10.0)
    h = model.fit(*toy(), epochs=3, verbose=0, callbacks=[plateau])
    # The rate in effect during each epoch; cut after epochs 1 and 2.
    assert h.history["lr"] == pytest.approx([0.025, 0.025, 0.0125])
    assert float(model.optimizer.learning_rate) == pytest.approx(0.00625)
    with pytest.raises(ValueError, match="factor >= 1.0"):
        tf.keras.callbacks.ReduceLROnPlateau(factor=2)


def test_csv_logger_terminate_on_nan_and_whole_model_checkpoints(tmp_path):
    model = model_with()
    log = tmp_path / "log.csv"
    ckpt = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "m{epoch}.keras"),
                                              save_weights_only=False)
    model.fit(*toy(), epochs=2, verbose=0,
              callbacks=[tf.keras.callbacks.CSVLogger(str(log)), ckpt,
                         tf.keras.callbacks.TerminateOnNaN(),
                         tf.keras.callbacks.ProgbarLogger()])
    rows = list(csv.DictReader(open(log)))
    assert [r["epoch"] for r in rows] == ["0", "1"] and "accuracy" in rows[0]
    loaded = tf.keras.models.load_model(str(tmp_path / "m2.keras"))
    x, _ = toy(10)
    np.testing.assert_allclose(loaded.predict(x), model.predict(x), rtol=1e-6)
    with pytest.raises(ValueError, match=".keras"):
        tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "m.h5"),
                                           save_weights_only=False)
    stop = tf.keras.callbacks.TerminateOnNaN()
    stop.set_model(model)
    stop.on_epoch_end(0, {"loss": float("nan")})
    assert model.stop_training


PROGRAM = textwrap.dedent("""
    import os, sys, numpy as np, strata as tf
    rng = np.random.default_rng(0)
    x = rng.random((2000, 2)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu",
                                                       input_shape=(2,)),
                                 tf.keras.layers.Dense(2, activation="softmax")])
    model.compile(tf.keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])

    class Report(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            print("begin", epoch, flush=True)
            if epoch == int(os.environ.get("HANG_AT", "-1")):
                import time
                time.sleep(600)  # killed here

    backup = tf.keras.callbacks.BackupAndRestore(sys.argv[1])
    h = model.fit(x, y, epochs=5, verbose=0, callbacks=[backup, Report()])
    print("epochs", h.epoch, flush=True)
""")


def test_backup_and_restore_resumes_a_killed_fit(tmp_path):
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    backup = str(tmp_path / "backup")
    env = dict(os.environ, HANG_AT="3")
    p = subprocess.Popen([sys.executable, str(program), backup], env=env,
                         stdout=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:  # bounded: the program hangs at epoch 3's start
        lines.append(line.strip())
        if line.startswith("begin 3"):
            break
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert lines[-1] == "begin 3" and os.path.exists(os.path.join(backup, "latest"))
    out = subprocess.run([sys.executable, str(program), backup], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    # Epochs 0-2 were backed up: the second run trains epochs 3 and 4 only.
    assert "begin 0" not in out.stdout and "begin 3" in out.stdout
    assert "epochs [3, 4]" in out.stdout
    assert not os.path.exists(backup)  # deleted once the fit ended
