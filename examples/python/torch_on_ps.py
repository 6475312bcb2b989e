"""A torch.nn model whose parameters live on a Strata parameter server.

Each step pulls every parameter into the numpy array that backs the torch
parameter (torch.from_numpy: no copy), runs forward and backward in torch,
and pushes each .grad to the PS, whose optimizer (Adam here) applies it
exactly once per step. Then the same model is trained in plain PyTorch
(torch.optim.Adam) for comparison, and both test accuracies are printed.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/torch_on_ps.py \
        [--ps HOST:PORT] [--epochs 2] [--limit-train N]

Without --ps a strata-ps is started on 127.0.0.1 for the run.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch

import strata
from strata._bindir import bin_dir


def start_ps():
    proc = subprocess.Popen([os.path.join(bin_dir(), "strata-ps"), "--host=127.0.0.1",
                             "--port=0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"listening on (\S+)", proc.stdout.readline())
        if m:
            return proc, m.group(1)
    proc.kill()
    raise RuntimeError("strata-ps did not start")


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def batches(n, batch, seed, epoch):
    order = np.random.default_rng(seed * 1000 + epoch).permutation(n)
    for start in range(0, n, batch):
        yield order[start:start + batch]


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def train_on_ps(client, x, y, epochs, batch, seed):
    model = make_model(seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    names, arrays = [], []
    for i, p in enumerate(model.parameters()):
        name = "torch/param_%d" % i
        names.append(name)
        client.create_variable(name, shape=tuple(p.shape), initializer="zeros",
                               optimizer=strata.keras.optimizers.Adam(0.001))
        client.assign(name, p.detach().numpy())  # torch's initial values
        # The array the PS writes each pull into, and torch reads.
        arrays.append(client.pull(name))
        p.data = torch.from_numpy(arrays[-1])  # shares the array's memory
    params = list(model.parameters())
    step = 0
    for epoch in range(epochs):
        for idx in batches(len(x), batch, seed, epoch):
            for name, arr in zip(names, arrays):
                client.pull(name, out=arr)  # in place: torch sees it
            model.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            for name, p in zip(names, params):
                client.push(name, p.grad.numpy(), step=step)
            step += 1
    for name, arr in zip(names, arrays):
        client.pull(name, out=arr)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ps", default="")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--limit-train", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    (x, y), (xt, yt) = strata.keras.datasets.fashion_mnist.load_data()
    if a.limit_train:
        x, y = x[:a.limit_train], y[:a.limit_train]
    x = torch.from_numpy(x.reshape(-1, 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(y.astype(np.int64))
    xt = torch.from_numpy(xt.reshape(-1, 784).astype(np.float32) / 255.0)
    yt = torch.from_numpy(yt.astype(np.int64))
    proc = None
    target = a.ps
    if not target:
        proc, target = start_ps()
    try:
        client = strata.PsClient(target, job="torch")
        on_ps = train_on_ps(client, x, y, a.epochs, a.batch_size, a.seed)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
    plain = make_model(a.seed)
    opt = torch.optim.Adam(plain.parameters(), lr=0.001, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(a.epochs):
        for idx in batches(len(x), a.batch_size, a.seed, epoch):
            opt.zero_grad()
            loss_fn(plain(x[idx]), y[idx]).backward()
            opt.step()
    result = {"strata_ps_test_accuracy": accuracy(on_ps, xt, yt),
              "plain_torch_test_accuracy": accuracy(plain, xt, yt)}
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
