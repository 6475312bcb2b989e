"""Strategies bound to a running cluster by the resolver: daemons started
by hand on 127.0.0.1 (as Kubernetes would start them), named by TF_CONFIG's
chief (the coordinator), ps and worker tasks."""
import json
import os
import re
import subprocess
import time

import numpy as np
import pytest

import strata as tf
from strata import errors
from strata._bindir import bin_dir

FASHION = "/usr/share/datasets/fashion-mnist"
needs_fashion = pytest.mark.skipif(
    not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")),
    reason="Fashion-MNIST is not installed")


class Cluster:
    """A coordinator, one PS task and two workers as processes."""

    def __init__(self, root, worker_flags=()):
        self.procs = []
        self.root = root
        coordinator = self._start(
            "coordinator", ["strata-coordinator", "--host=127.0.0.1", "--port=0",
                            "--state-dir=%s" % (root / "state")])
        self.coordinator = coordinator
        self.ps = self._start(
            "ps", ["strata-ps", "--host=127.0.0.1", "--port=0", "--task-index=0",
                   "--checkpoint-dir=%s" % (root / "ckpt"),
                   "--coordinator=%s" % coordinator])
        for i in range(2):
            self._start("worker%d" % i,
                        ["strata-worker", "--coordinator=%s" % coordinator,
                         "--task-index=%d" % i] + list(worker_flags), listens=False)

    def _start(self, name, argv, listens=True):
        argv = [os.path.join(bin_dir(), argv[0])] + argv[1:]
        log = open(self.root / ("%s.log" % name), "w")
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE if listens else log,
                                stderr=log, text=True, env=env)
        self.procs.append(proc)
        if not listens:
            return None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # EOF when it exits
            if not line:
                break
            m = re.search(r"listening on (\S+)", line)
            if m:
                return m.group(1)
        raise AssertionError("%s did not print its address (see %s)" % (name, log.name))

    def tf_config(self):
        return json.dumps({"cluster": {"chief": [self.coordinator], "ps": [self.ps],
                                       "worker": ["w0:1", "w1:1"]},
                           "task": {"type": "chief", "index": 0}})

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)


@pytest.fixture
def fashion():
    (x, y), (xt, yt) = tf.keras.datasets.fashion_mnist.load_data()
    return ((x[:3000].reshape(-1, 784).astype("float32") / 255.0, y[:3000]),
            (xt[:1000].reshape(-1, 784).astype("float32") / 255.0, yt[:1000]))


def _model():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(64, activation="relu", input_shape=(784,)),
        tf.keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def test_a_chief_in_the_resolver_names_a_running_cluster(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["10.0.0.1:2222"], "ps": ["p:1", "p:2"],
                    "worker": ["w:1", "w:2", "w:3"]},
        "task": {"type": "chief", "index": 0}}))
    s = tf.distribute.ParameterServerStrategy()
    assert s.coordinator == "10.0.0.1:2222"
    assert (s.num_ps, s.num_workers, s.num_replicas_in_sync) == (2, 3, 3)
    m = tf.distribute.MultiWorkerMirroredStrategy()
    assert m.coordinator == "10.0.0.1:2222" and m.num_workers == 3
    monkeypatch.delenv("TF_CONFIG")
    assert tf.distribute.ParameterServerStrategy().coordinator is None
    with pytest.raises(ValueError, match="host:port"):
        tf.distribute.ParameterServerStrategy(
            tf.distribute.cluster_resolver.SimpleClusterResolver(
                {"chief": ["nohost"], "ps": ["p:1"], "worker": ["w:1"]}))


def test_multi_worker_mirrored_on_a_running_cluster_needs_an_export_dir(monkeypatch):
    monkeypatch.delenv("STRATA_EXPORT_DIR", raising=False)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        {"chief": ["127.0.0.1:1"], "worker": ["w:1", "w:2"]})
    with tf.distribute.MultiWorkerMirroredStrategy(resolver).scope():
        model = _model()
    x = np.zeros((8, 784), np.float32)
    with pytest.raises(errors.FailedPreconditionError, match="export_dir"):
        model.fit(x, np.zeros(8, np.int64), epochs=1, verbose=0)


@needs_fashion
def test_parameter_server_fit_on_a_running_cluster(tmp_path, monkeypatch, fashion):
    (x, y), (xt, yt) = fashion
    cluster = Cluster(tmp_path)
    try:
        monkeypatch.setenv("TF_CONFIG", cluster.tf_config())
        strategy = tf.distribute.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver())
        assert strategy.coordinator == cluster.coordinator
        with strategy.scope():
            model = _model()
        seen = []
        h = model.fit(x, y, batch_size=64, epochs=2, validation_data=(xt, yt),
                      verbose=0, callbacks=[tf.keras.callbacks.LambdaCallback(
                          on_epoch_end=lambda epoch, logs: seen.append(epoch))])
        assert seen == [0, 1]
        assert len(h.history["val_accuracy"]) == 2
        assert h.history["val_accuracy"][-1] > 0.6
        # The weights were read back from the running cluster's PS task.
        _, acc = model.evaluate(xt, yt, verbose=0)
        assert abs(acc - h.history["val_accuracy"][-1]) < 1e-9
    finally:
        cluster.stop()


@needs_fashion
def test_multi_worker_mirrored_fit_on_a_running_cluster(tmp_path, monkeypatch, fashion):
    (x, y), (xt, yt) = fashion
    export = tmp_path / "export"
    cluster = Cluster(tmp_path, worker_flags=["--export-dir=%s" % export])
    try:
        monkeypatch.setenv("TF_CONFIG", cluster.tf_config())
        monkeypatch.setenv("STRATA_EXPORT_DIR", str(export))
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = _model()
        h = model.fit(x, y, batch_size=64, epochs=1, validation_data=(xt, yt),
                      verbose=0)
        assert h.history["val_accuracy"][-1] > 0.6
        _, acc = model.evaluate(xt, yt, verbose=0)
        assert abs(acc - h.history["val_accuracy"][-1]) < 1e-9
    finally:
        cluster.stop()
