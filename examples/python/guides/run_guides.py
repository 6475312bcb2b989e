"""Runs each guide program of this folder in a scratch directory and prints
a table: the accuracy each reached against the class its guide reports.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/guides/run_guides.py [--epochs N] [NAME ...]

Exit status 1 when a guide fails or stays below its class. `make guides`
runs them in full (the guides' own epochs)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (program, what its guide trains, the accuracy it must reach in full and
# with --epochs 1). The guides train MNIST (~0.98-0.99); Fashion-MNIST, in
# its place here, is harder, and the classes are what the same models reach
# on it: a CNN ~0.90 after 12 epochs, an MLP ~0.84-0.87 after 2-3. The
# multi-worker guide trains 3 x 70 steps of SGD at 0.001 (~0.4 on
# Fashion-MNIST, 0.6-0.8 on MNIST in the guide).
GUIDES = [
    ("distributed_training_with_keras.py", "CNN, 12 epochs, MirroredStrategy", 0.89, 0.85),
    ("multi_worker_training_with_keras.py", "CNN, 3 x 70 steps, MultiWorkerMirrored",
     0.35, 0.15),
    ("functional_api.py", "MLP, 2 epochs (+ toy ResNet, shared layers)", 0.83, 0.80),
    ("subclassing_models.py", "subclassed models of built-in layers, 3 epochs", 0.85,
     0.82),
    ("save_and_serialize.py", ".keras, config, JSON, weights round trips", 0.83, 0.80),
    ("custom_training.py", "GradientTape loop, strategy.run, 10 epochs, CNN", 0.89, 0.84),
]


def run(program, epochs, timeout):
    env = dict(os.environ)
    # The programs run in a scratch directory: PYTHONPATH made absolute.
    env["PYTHONPATH"] = os.pathsep.join(
        os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    if epochs:
        env["STRATA_GUIDE_EPOCHS"] = str(epochs)
    with tempfile.TemporaryDirectory(prefix="guide_") as scratch:
        start = time.monotonic()
        out = subprocess.run([sys.executable, os.path.join(HERE, program)], cwd=scratch,
                             env=env, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
    m = re.search(r"GUIDE_RESULT accuracy=([0-9.]+)", out.stdout)
    return out, (float(m.group(1)) if m else None), seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=0,
                    help="STRATA_GUIDE_EPOCHS for every guide (0: the guides' own)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    failed = False
    print("| guide | what | accuracy | class | seconds | result |")
    print("|---|---|---|---|---|---|")
    for program, what, full, short in GUIDES:
        if args.names and not any(n in program for n in args.names):
            continue
        out, acc, seconds = run(program, args.epochs, args.timeout)
        need = short if args.epochs else full
        ok = out.returncode == 0 and acc is not None and acc >= need
        failed |= not ok
        print("| %s | %s | %s | >= %.2f | %.0f | %s |" % (
            program, what, "%.4f" % acc if acc is not None else "-", need, seconds,
            "ok" if ok else "FAILED (exit %d)" % out.returncode), flush=True)
        if not ok:
            sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
