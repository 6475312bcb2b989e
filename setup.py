"""pip install . : the strata Python package, built by the project's CMake.

    /usr/bin/python3 -m pip install --no-build-isolation --no-index .

(offline: setuptools and wheel come from Debian, nothing is downloaded).
CMake configures and builds the extension module and the daemons in
$STRATA_PIP_BUILD_DIR (default: build/, the directory `make build` uses, so
an install after it only copies); the wheel holds the package's Python
files, _strata, and the daemons local clusters run (strata/bin).
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
DAEMONS = ("strata-coordinator", "strata-ps", "strata-worker", "strata")
os.makedirs(os.path.join(ROOT, "build", "setuptools"), exist_ok=True)


class CMakeBuildPy(build_py):
    def run(self):
        build_dir = os.path.abspath(os.environ.get("STRATA_PIP_BUILD_DIR",
                                                   os.path.join(ROOT, "build")))
        jobs = os.environ.get("JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir,
                               "-DSTRATA_WITH_PYTHON=ON"])
        subprocess.check_call(["cmake", "--build", build_dir, "-j" + jobs, "--target",
                               "_strata"] + list(DAEMONS))
        super().run()
        target = os.path.join(self.build_lib, "strata")
        modules = glob.glob(os.path.join(build_dir, "python", "strata", "_strata*.so"))
        if not modules:
            raise RuntimeError("the build made no _strata module in %s" % build_dir)
        for module in modules:
            shutil.copy2(module, target)
        os.makedirs(os.path.join(target, "bin"), exist_ok=True)
        copied = []
        for daemon in DAEMONS:
            copied.append(os.path.join(target, "bin", daemon))
            shutil.copy2(os.path.join(build_dir, "bin", daemon), copied[-1])
        copied += [os.path.join(target, os.path.basename(m)) for m in modules]
        # Without the debug information (RelWithDebInfo's is most of the size).
        if shutil.which("strip"):
            subprocess.check_call(["strip", "--strip-debug"] + copied)
        # The installed package finds its own daemons (strata/_bindir.py).
        stale = os.path.join(target, "BIN_DIR")
        if os.path.exists(stale):
            os.remove(stale)


setup(
    name="strata",
    version="0.5.0",
    description="Distributed training in the style of tf.distribute (Python SDK)",
    package_dir={"": "python"},
    packages=["strata", "strata.keras", "strata.keras.datasets"],
    python_requires=">=3.9",
    install_requires=["numpy"],
    cmdclass={"build_py": CMakeBuildPy},
    # setuptools' own build tree, beside (not inside) CMake's files.
    options={"build": {"build_base": "build/setuptools"},
             "egg_info": {"egg_base": "build/setuptools"}},
    zip_safe=False,
)
