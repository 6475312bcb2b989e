"""`pip install .` offline (Debian's setuptools, no index) into a virtual
environment: the installed package imports without PYTHONPATH and trains
on a local cluster with its own copies of the daemons."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _build_dir():
    import strata
    # build/python/strata/__init__.py -> build
    return os.path.dirname(os.path.dirname(os.path.dirname(strata.__file__)))


@pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import venv, ensurepip"],
                                   capture_output=True).returncode != 0,
                    reason="python3-venv is not installed")
def test_pip_install_offline_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    env = dict(os.environ, STRATA_PIP_BUILD_DIR=_build_dir(), JOBS="2")
    env.pop("PYTHONPATH", None)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                          "--no-index", ROOT], env=env, capture_output=True, text=True,
                         timeout=900)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    program = r"""
import numpy as np, strata as tf
from strata._bindir import bin_dir
assert "site-packages" in tf.__file__, tf.__file__
assert bin_dir().startswith(tf.__file__.rsplit("/", 1)[0]), bin_dir()
s = tf.distribute.ParameterServerStrategy()
with s.scope():
    m = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(2,)),
                             tf.keras.layers.Dense(2, activation="softmax")])
m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
x = np.random.default_rng(0).random((400, 2)); y = (x[:, 0] > x[:, 1]).astype(int)
print(len(m.fit(x, y, epochs=2, verbose=0).history["loss"]))
"""
    env.pop("STRATA_BIN_DIR", None)
    run = subprocess.run([str(venv / "bin" / "python"), "-c", program], env=env,
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "2"
