"""strata.PsClient against a real strata-ps process on 127.0.0.1."""
import os
import re
import subprocess
import time

import numpy as np
import pytest

import strata
from strata import errors
from strata._bindir import bin_dir


@pytest.fixture(scope="module")
def ps(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("ps")
    proc = subprocess.Popen(
        [os.path.join(bin_dir(), "strata-ps"), "--host=127.0.0.1", "--port=0",
         "--checkpoint-dir=%s" % ckpt],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        if m:
            address = m.group(1)
            break
    assert address, "strata-ps did not print its address"
    yield strata.PsClient(address, deadline=10), ckpt
    proc.terminate()
    proc.wait(timeout=30)


def test_create_pull_push_round_trip(ps):
    c, _ = ps
    assert c.create_variable("w", shape=(4, 3), initializer="ones",
                             optimizer=strata.keras.optimizers.SGD(0.5)) is True
    assert c.create_variable("w", shape=(4, 3), initializer="ones",
                             optimizer=strata.keras.optimizers.SGD(0.5)) is False
    w, version = c.pull("w", return_version=True)
    assert w.shape == (4, 3) and w.dtype == np.float32 and version == 0
    np.testing.assert_array_equal(w, np.ones((4, 3), np.float32))
    r = c.push("w", np.full((4, 3), 2.0), step=0)  # float64 cast to float32
    assert r["applied"] and not r["duplicate"] and r["version"] == 1
    again = c.push("w", np.full((4, 3), 2.0), step=0)  # the same tag: once
    assert again["duplicate"] and not again["applied"]
    out = np.empty((4, 3), np.float32)
    same = c.pull("w", out=out)
    assert same is out or np.shares_memory(same, out)
    np.testing.assert_allclose(out, np.zeros((4, 3)))  # 1 - 0.5 * 2
    # A non-contiguous gradient is sent as its values.
    wide = np.zeros((4, 6), np.float32)
    wide[:, ::2] = 1.0
    c.push("w", wide[:, ::2], step=1)
    np.testing.assert_allclose(c.pull("w"), np.full((4, 3), -0.5))


def test_rows(ps):
    c, _ = ps
    c.create_variable("emb", shape=(10, 2), initializer="zeros", optimizer="sgd")
    c.push_rows("emb", [1, 7], np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), step=0)
    rows = c.pull_rows("emb", np.array([7, 1, 0]))
    np.testing.assert_allclose(rows, [[-0.03, -0.04], [-0.01, -0.02], [0, 0]], rtol=1e-6)


def test_errors_are_tf_error_classes(ps):
    c, _ = ps
    with pytest.raises(errors.NotFoundError, match="nope"):
        c.pull("nope")
    c.create_variable("v", shape=(3,), optimizer="sgd")
    with pytest.raises(errors.InvalidArgumentError, match="shape"):
        c.push("v", np.zeros(4, np.float32), step=0)
    with pytest.raises(errors.InvalidArgumentError, match="NaN|finite"):
        c.push("v", np.array([0.0, np.nan, 0.0], np.float32), step=1)
    np.testing.assert_array_equal(c.pull("v"), np.zeros(3))  # unchanged
    with pytest.raises(errors.InvalidArgumentError, match="writeable C-contiguous"):
        c.pull("v", out=np.zeros(6, np.float32)[::2])
    with pytest.raises(errors.OpError):
        c.pull("v", out=np.zeros(5, np.float32))  # wrong size
    with pytest.raises(ValueError, match="`initializer`"):
        c.create_variable("x", shape=(2,), initializer="bogus")
    with pytest.raises(errors.InvalidArgumentError, match="float16"):
        strata.PsClient(c._native_target).push("v", np.zeros(3, np.float16), step=2)


def test_save_and_restore(ps):
    c, _ = ps
    c.create_variable("s", shape=(2,), initializer="ones", optimizer="sgd")
    saved = c.save("ckpt-py")
    assert saved["num_variables"] >= 1
    c.push("s", np.ones(2, np.float32), step=0)
    assert c.pull("s")[0] != 1.0
    assert c.restore("ckpt-py") >= 1
    np.testing.assert_array_equal(c.pull("s"), np.ones(2, np.float32))
    names = {v["name"] for v in c.list_variables()}
    assert "s" in names


def test_assign_replaces_the_value(ps):
    c, _ = ps
    c.create_variable("a", shape=(2, 2), optimizer="sgd")
    version = c.assign("a", np.arange(4, dtype=np.float64).reshape(2, 2))
    assert version >= 1
    np.testing.assert_array_equal(c.pull("a"), [[0, 1], [2, 3]])
    with pytest.raises(errors.InvalidArgumentError):
        c.assign("a", np.zeros((3, 2), np.float32))


@pytest.mark.skipif(not __import__("importlib").util.find_spec("torch"),
                    reason="PyTorch (python3-torch) is not installed")
def test_torch_model_on_the_ps_trains_as_plain_torch():
    import json
    import sys
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                           "examples", "python", "torch_on_ps.py")
    out = subprocess.run([sys.executable, program, "--epochs", "2",
                          "--limit-train", "12000"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["plain_torch_test_accuracy"] > 0.75
    assert abs(r["strata_ps_test_accuracy"] - r["plain_torch_test_accuracy"]) <= 0.01
