#!/usr/bin/env python3
"""The CNN of TensorFlow's "Distributed training with Keras" guide in
PyTorch, on Fashion-MNIST: the baseline bench/cnn_compare.sh runs beside
Strata's local_train and multi_worker_mirrored.

  Conv2d(1, 32, 3) -> ReLU -> MaxPool2d(2) -> Flatten -> Linear(5408, 64)
  -> ReLU -> Linear(64, 10), cross-entropy on logits, Adam(1e-3), batch 64.

--workers 1: one process; --workers N: DistributedDataParallel with gloo,
N processes on 127.0.0.1, each a 1/N share of every global batch (as
multi_worker_mirrored divides it). Prints one JSON line: examples/s over
all epochs (training only), test accuracy after the last epoch.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)


def load(limit_train):
    x = idx(f"{DATA}/train-images-idx3-ubyte.gz")[:limit_train or None]
    y = idx(f"{DATA}/train-labels-idx1-ubyte.gz")[:limit_train or None]
    tx = idx(f"{DATA}/t10k-images-idx3-ubyte.gz")
    ty = idx(f"{DATA}/t10k-labels-idx1-ubyte.gz")
    f = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0).unsqueeze(1)
    return f(x), torch.from_numpy(y.astype(np.int64)), f(tx), \
        torch.from_numpy(ty.astype(np.int64))


def blas_library():
    """The BLAS this process mapped (Debian's torch links libblas.so.3,
    which the alternatives system points at OpenBLAS when installed)."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    for name in ("openblas", "libblas"):
        for line in maps.splitlines():
            if name in line:
                return line.split()[-1]
    return "unknown"


def make_model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(13 * 13 * 32, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def run(rank, args, port, out):
    torch.set_num_threads(args.threads)
    x, y, tx, ty = load(args.limit_train)
    model = make_model()
    if args.workers > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=args.workers)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    g = torch.Generator().manual_seed(42)
    timed_examples = 0
    timed_seconds = 0.0
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=g)
        start = time.perf_counter()
        for b in range(0, n, args.batch):
            idx_b = perm[b:b + args.batch]
            share = idx_b[rank::args.workers] if args.workers > 1 else idx_b
            opt.zero_grad()
            loss = loss_fn(model(x[share]), y[share])
            loss.backward()
            opt.step()
        elapsed = time.perf_counter() - start
        # Every epoch counts, as Strata's train_examples_per_second counts
        # them (training time only, no evaluation).
        timed_examples += n
        timed_seconds += elapsed
    model.eval()
    with torch.no_grad():
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    if rank == 0:
        out.put({"workers": args.workers, "threads": args.threads,
                 "examples_per_second": timed_examples / timed_seconds,
                 "test_accuracy": acc, "epochs": args.epochs,
                 "torch": torch.__version__,
                 "blas": blas_library()})
    if args.workers > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--limit-train", type=int, default=0)
    p.add_argument("--port", type=int, default=29511)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    if args.workers == 1:
        run(0, args, args.port, out)
    else:
        procs = [ctx.Process(target=run, args=(r, args, args.port, out))
                 for r in range(args.workers)]
        for proc in procs:
            proc.start()
        result = out.get()
        for proc in procs:
            proc.join()
        print(json.dumps(result))
        return
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
