"""Ctrl-C (SIGINT) stops a fit and, under a cluster strategy, its local
cluster: the program ends with KeyboardInterrupt and no daemon outlives it."""
import os
import signal
import subprocess
import sys
import time

import pytest

PROGRAM = r"""
import sys, numpy as np, strata as tf
rng = np.random.default_rng(0)
x = rng.random((20000, 64), dtype=np.float32)
y = (x[:, 0] > x[:, 1]).astype(np.int32)
strategy = {"one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
            "parameter_server": lambda: tf.distribute.ParameterServerStrategy()}[sys.argv[1]]()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu", input_shape=(64,)),
                                 tf.keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
print("fitting", flush=True)
model.fit(x, y, batch_size=16, epochs=1000, verbose=0)
print("fit returned", flush=True)
"""


def children(pid):
    """The pids whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def alive(pids):
    return [p for p in pids if os.path.exists("/proc/%d" % p)
            and open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] != "Z"]


@pytest.mark.parametrize("strategy", ["one_device", "parameter_server"])
def test_sigint_stops_fit_and_its_cluster(strategy):
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, strategy], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "fitting"
    daemons = []
    if strategy == "parameter_server":
        # Until the coordinator, the 2 PS tasks and the 2 workers run.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(daemons) < 5:
            daemons = children(proc.pid)
            time.sleep(0.1)
        assert len(daemons) >= 5, daemons
        time.sleep(1.0)
    else:
        time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("fit did not stop within 60 s of SIGINT")
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert "fit returned" not in out
    deadline = time.monotonic() + 15
    while alive(daemons) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(daemons) == []
