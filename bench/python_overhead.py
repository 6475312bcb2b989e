#!/usr/bin/env python3
"""Python fit against the C++ SDK on the reference model, side by side.

Runs build/bin/fashion_mnist_train (the C++ SDK) and the same model through
the strata Python package (one process each, same strategy, batch 128, Adam,
all 60000 examples), alternating, and prints the train examples/s of each
(the median over epochs after the first) and their ratio, with the test
accuracies. Usage (from the repository root, after `make build`):

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py \
        [--strategy one_device] [--epochs 4] [--runs 2] [--model mlp|cnn]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCH = re.compile(r"Epoch \d+/\d+ - .* - (\d+) examples/s")
ACC = re.compile(r"test_accuracy: ([0-9.]+)|Test accuracy: ([0-9.]+)")


def cpp(strategy, epochs, model):
    out = subprocess.run(
        [os.path.join(ROOT, "build/bin/fashion_mnist_train"), "--strategy", strategy,
         "--epochs", str(epochs), "--workers", "1", "--model", model],
        capture_output=True, text=True, check=True).stdout
    rates = [float(m.group(1)) for m in EPOCH.finditer(out)]
    accs = [float(a or b) for a, b in ACC.findall(out)]
    return rates, accs[-1] if accs else float("nan")


def python(strategy, epochs, model_name):
    import numpy as np
    import strata as tf
    (x, y), (xt, yt) = tf.keras.datasets.fashion_mnist.load_data()
    x = x.reshape(-1, 784).astype("float32") / 255.0
    xt = xt.reshape(-1, 784).astype("float32") / 255.0
    s = {"one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
         "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0"])}[strategy]()
    layers = tf.keras.layers
    with s.scope():
        if model_name == "cnn":  # fashion_mnist_train --model cnn's
            model = tf.keras.Sequential([
                layers.Reshape((28, 28, 1), input_shape=(784,)),
                layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(),
                layers.Flatten(), layers.Dense(64, activation="relu"),
                layers.Dense(10)], name="fashion-mnist-cnn")
            loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        else:
            model = tf.keras.Sequential([
                layers.Dense(128, activation="relu", input_shape=(784,)),
                layers.Dense(10, activation="softmax")])
            loss = "sparse_categorical_crossentropy"
    model.compile(tf.keras.optimizers.Adam(), loss, metrics=["accuracy"])
    times = []
    cb = tf.keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda e, logs=None: times.append(time.monotonic()),
        on_epoch_end=lambda e, logs=None: times.append(time.monotonic()))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000).batch(128)
    model.fit(ds, epochs=epochs, verbose=0, callbacks=[cb])
    rates = [len(x) / (times[2 * i + 1] - times[2 * i]) for i in range(epochs)]
    return rates, model.evaluate(xt, yt, verbose=0)[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", default="one_device", choices=["one_device", "mirrored"])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    a = p.parse_args()
    rows = []
    for run in range(a.runs):
        c_rates, c_acc = cpp(a.strategy, a.epochs, a.model)
        p_rates, p_acc = python(a.strategy, a.epochs, a.model)
        c = statistics.median(c_rates[1:] or c_rates)
        py = statistics.median(p_rates[1:] or p_rates)
        rows.append((run + 1, c, py, py / c, c_acc, p_acc))
    print("| run | C++ SDK examples/s | Python examples/s | Python / C++ | C++ test acc | Python test acc |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %d | %.0f | %.0f | %.3f | %.4f | %.4f |" % r)


if __name__ == "__main__":
    sys.exit(main())
