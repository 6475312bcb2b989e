#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/<target>/seed-*).

Run from anywhere: python3 tests/fuzz/make_seeds.py. The seeds are committed;
this script says how they were made and remakes them after a change of the
input layouts (see each fuzz_<target>.cc). Standard library only: protobuf
messages are encoded by hand (field numbers from proto/strata/v1/*.proto).
"""

import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# ---- protobuf wire format ----


def varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(field, wire):
    return varint((field << 3) | wire)


def f_int(field, v):
    return key(field, 0) + varint(int(v)) if v else b""


def f_bool(field, v):
    return f_int(field, 1 if v else 0)


def f_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return key(field, 2) + varint(len(b)) + b


def f_str(field, s):
    return f_bytes(field, s) if s else b""


def f_msg(field, m):
    return f_bytes(field, m)


def f_double(field, v):
    return key(field, 1) + struct.pack("<d", v) if v else b""


def f_packed(field, values):
    if not values:
        return b""
    return f_bytes(field, b"".join(varint(v) for v in values))


DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_INT64 = 1, 2, 3, 4
ASYNC, SYNC, STALENESS = 0, 1, 2


def initializer(type_, seed=0, value=0.0, minval=0.0, maxval=0.0, mean=0.0,
                stddev=0.0):
    return (f_str(1, type_) + f_int(2, seed) + f_double(3, value) +
            f_double(4, minval) + f_double(5, maxval) + f_double(6, mean) +
            f_double(7, stddev))


def optimizer(type_, lr=0.0, momentum=0.0, nesterov=False, amsgrad=False,
              centered=False, rho=0.0, init_acc=0.0):
    return (f_str(1, type_) + f_double(2, lr) + f_double(3, momentum) +
            f_bool(4, nesterov) + f_bool(8, amsgrad) + f_double(9, init_acc) +
            f_double(10, rho) + f_bool(11, centered))


def update_mode(kind=ASYNC, replicas=0, staleness=0):
    return f_int(1, kind) + f_int(2, replicas) + f_int(3, staleness)


def variable_spec(name, dtype, shape, init=b"", opt=b"", mode=b"",
                  full_shape=(), row_offset=0, full_name=""):
    return (f_str(1, name) + f_int(2, dtype) + f_packed(3, shape) +
            f_packed(4, full_shape) + f_int(5, row_offset) +
            (f_msg(6, init) if init else b"") +
            (f_msg(7, opt) if opt else b"") +
            (f_msg(8, mode) if mode else b"") + f_str(9, full_name))


def create_request(spec):
    return f_msg(1, spec)


def push_tag(job="job", worker=0, step=0, attempt=0):
    return f_str(1, job) + f_int(2, worker) + f_int(3, step) + f_int(4, attempt)


def push_header(name, dtype, shape, payload_bytes, rows=False, num_rows=0,
                tag=b""):
    return (f_str(1, name) + f_int(2, dtype) + f_packed(3, shape) +
            f_bool(4, rows) + f_int(5, num_rows) +
            (f_msg(6, tag) if tag else b"") + f_int(7, payload_bytes))


def assign_header(name, dtype, shape, payload_bytes):
    return (f_str(1, name) + f_int(2, dtype) + f_packed(3, shape) +
            f_int(4, payload_bytes))


def variable_slot(name, dtype, shape, nbytes):
    return f_str(1, name) + f_int(2, dtype) + f_packed(3, shape) + f_int(4, nbytes)


def push_variables_header(slots, payload_bytes, tag=b""):
    return (b"".join(f_msg(1, s) for s in slots) +
            (f_msg(2, tag) if tag else b"") + f_int(3, payload_bytes))


def pull_request(name, row_ids=(), rows=False, min_version=0, clock=0,
                 worker=0):
    return (f_str(1, name) + f_packed(2, row_ids) + f_bool(3, rows) +
            f_int(4, min_version) + f_int(5, clock) + f_int(6, worker))


def pull_variables_request(names, min_version=0, clock=0, worker=0):
    return (b"".join(f_str(1, n) for n in names) + f_int(2, min_version) +
            f_int(3, clock) + f_int(4, worker))


def path_request(path):
    return f_str(1, path)


def tensor_chunk(header=b"", offset=0, data=b""):
    return ((f_bytes(1, header) if header else b"") + f_int(2, offset) +
            (f_bytes(3, data) if data else b""))


# ---- record framing (tests/fuzz/fuzz_util.h) ----


def record(b):
    assert len(b) < 1 << 16
    return struct.pack("<H", len(b)) + b


def floats(*vs):
    return struct.pack("<%df" % len(vs), *vs)


def doubles(*vs):
    return struct.pack("<%dd" % len(vs), *vs)


def int64s(*vs):
    return struct.pack("<%dq" % len(vs), *vs)


# ---- CRC32C (Castagnoli), as common/crc32c ----


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# ---- corpora ----


def ps_create():
    seeds = {}
    specs = {
        "dense-glorot-adam": variable_spec(
            "dense/kernel", DT_FLOAT32, [8, 4],
            initializer("glorot_uniform", seed=1), optimizer("adam", lr=0.01)),
        "bias-zeros-sgd": variable_spec(
            "dense/bias", DT_FLOAT32, [4], initializer("zeros"),
            optimizer("sgd", momentum=0.9, nesterov=True)),
        "shard-truncnormal": variable_spec(
            "emb", DT_FLOAT32, [3, 2], initializer("truncated_normal", seed=3,
                                                   stddev=0.5),
            optimizer("adagrad", init_acc=0.1), full_shape=[10, 2],
            row_offset=4, full_name="emb/full"),
        "f64-uniform-rmsprop-sync": variable_spec(
            "w64", DT_FLOAT64, [2, 3], initializer("random_uniform", seed=9,
                                                   minval=-1, maxval=1),
            optimizer("rmsprop", centered=True, momentum=0.5),
            update_mode(SYNC, 3)),
        "i64-constant-staleness": variable_spec(
            "steps", DT_INT64, [5], initializer("constant", value=7),
            optimizer("assign_add"), update_mode(STALENESS, 2, 1)),
        "i32-ones": variable_spec("flags", DT_INT32, [2, 2], initializer("ones"),
                                  optimizer("assign_add")),
        "normal-amsgrad": variable_spec(
            "n", DT_FLOAT32, [6], initializer("random_normal", seed=5, mean=1,
                                              stddev=2),
            optimizer("adam", amsgrad=True)),
        "he-glorotnormal": variable_spec(
            "he", DT_FLOAT32, [4, 4], initializer("he_normal", seed=2),
            optimizer("sgd")),
        "scalar": variable_spec("s", DT_FLOAT32, [], initializer("ones"),
                                optimizer("sgd")),
        "empty-dim": variable_spec("e", DT_FLOAT32, [0, 5], initializer("zeros"),
                                   optimizer("sgd")),
    }
    for name, spec in specs.items():
        seeds[name] = record(create_request(spec))
    # Same name twice (identical: not created again), then a conflict.
    a = variable_spec("v", DT_FLOAT32, [2], initializer("zeros"), optimizer("sgd"))
    b = variable_spec("v", DT_FLOAT32, [3], initializer("zeros"), optimizer("sgd"))
    seeds["recreate-then-conflict"] = (record(create_request(a)) +
                                       record(create_request(a)) +
                                       record(create_request(b)))
    seeds["too-large"] = record(create_request(variable_spec(
        "big", DT_FLOAT64, [1 << 20, 1 << 20], initializer("zeros"))))
    seeds["bad-dtype"] = record(create_request(variable_spec(
        "bad", 9, [2], initializer("zeros"))))
    return seeds


def ps_push():
    seeds = {}
    tag = push_tag("job", 0, 0)
    dense = push_header("dense", DT_FLOAT32, [4, 3], 48, tag=tag)
    seeds["push-dense"] = b"\x00" + record(dense) + record(floats(*[0.1] * 12))
    rows = push_header("emb", DT_FLOAT32, [3, 2], 3 * (8 + 8), rows=True,
                       num_rows=3, tag=push_tag("job", 1, 4))
    seeds["push-rows-duplicate-ids"] = (
        b"\x00" + record(rows) + record(int64s(1, 5, 1) + floats(*[0.5] * 6)))
    sync = [push_header("sync", DT_FLOAT32, [4, 2], 32,
                        tag=push_tag("job", w, 0)) for w in (0, 1)]
    seeds["push-sync-two-replicas"] = b"".join(
        b"\x00" + record(h) + record(floats(*[1.0] * 8)) for h in sync)
    sync_rows = push_header("sync", DT_FLOAT32, [1, 2], 16, rows=True,
                            num_rows=1, tag=push_tag("job", 1, 0))
    seeds["push-sync-dense-and-rows"] = (
        b"\x00" + record(sync[0]) + record(floats(*[1.0] * 8)) +
        b"\x00" + record(sync_rows) + record(int64s(3) + floats(2.0, 2.0)))
    stale = push_header("stale", DT_FLOAT64, [2, 2], 32,
                        tag=push_tag("job", 1, 2))
    seeds["push-staleness"] = b"\x00" + record(stale) + record(doubles(1, 2, 3, 4))
    count = push_header("count", DT_INT64, [4], 32, tag=push_tag("job", 0, 1))
    seeds["push-int-twice-duplicate"] = (
        (b"\x00" + record(count) + record(int64s(1, 2, 3, 4))) * 2)
    seeds["push-nan"] = b"\x00" + record(dense) + record(
        floats(float("nan"), *[0.0] * 11))
    seeds["assign-adam"] = b"\x01" + record(
        assign_header("adam", DT_FLOAT32, [3], 12)) + record(floats(1, 2, 3))
    seeds["assign-wrong-shape"] = b"\x01" + record(
        assign_header("dense", DT_FLOAT32, [3, 4], 48)) + record(b"")
    pv = push_variables_header(
        [variable_slot("dense", DT_FLOAT32, [4, 3], 48),
         variable_slot("adam", DT_FLOAT32, [3], 12),
         variable_slot("sync", DT_FLOAT32, [4, 2], 32)], 92,
        tag=push_tag("job", 1, 0))
    seeds["push-variables"] = b"\x02" + record(pv) + record(floats(*[0.25] * 23))
    pv_missing = push_variables_header(
        [variable_slot("dense", DT_FLOAT32, [4, 3], 48),
         variable_slot("nope", DT_FLOAT32, [1], 4)], 52)
    seeds["push-variables-unknown"] = b"\x02" + record(pv_missing) + record(b"")
    wide = push_header("wide", DT_FLOAT32, [1, 4096], 8 + 4 * 4096, rows=True,
                       num_rows=1, tag=push_tag("job", 0, 3))
    seeds["push-rows-wide"] = b"\x00" + record(wide) + record(int64s(1))
    return seeds


def ps_pull():
    return {
        "pull-dense": b"\x00" + record(pull_request("dense")),
        "pull-rows": b"\x00" + record(pull_request("emb", [7, 0, 7], rows=True)),
        "pull-rows-wide": b"\x00" + record(pull_request("wide", [1, 0],
                                                        rows=True)),
        "pull-rows-out-of-range": b"\x00" + record(
            pull_request("emb", [8], rows=True)),
        "pull-wait-version": b"\x00" + record(pull_request("sync", min_version=2)),
        "pull-staleness-clock": b"\x00" + record(
            pull_request("stale", clock=5, worker=1)),
        "pull-negative": b"\x00" + record(pull_request("dense", min_version=-1)),
        "pull-variables": b"\x01" + record(
            pull_variables_request(["dense", "adam", "emb", "count", "empty"])),
        "pull-variables-wait": b"\x01" + record(
            pull_variables_request(["dense", "sync"], min_version=1)),
        "pull-variables-unknown": b"\x01" + record(
            pull_variables_request(["dense", "missing"])),
    }


def ps_save_restore():
    return {
        "restore-base": b"\x01" + record(path_request("base")),
        "save-then-restore": (b"\x00" + record(path_request("ckpt-7")) +
                              b"\x01" + record(path_request("ckpt-7"))),
        "save-nested": b"\x00" + record(path_request("a/b/../c")),
        "save-dotdot": b"\x00" + record(path_request("../escape")),
        "restore-missing": b"\x01" + record(path_request("nothing-here")),
        "save-over-base": b"\x00" + record(path_request("base")),
        "restore-absolute-outside": b"\x01" + record(path_request("/proc")),
        "empty-path": b"\x00" + record(path_request("")),
    }


def spec_json(name, dtype, shape, opt, mode=None):
    spec = {"name": name, "dtype": dtype, "shape": [str(d) for d in shape],
            "initializer": {"type": "zeros"}, "optimizer": {"type": opt}}
    if mode:
        spec["update_mode"] = mode
    return json.dumps(spec, separators=(",", ":"))


def checkpoint_manifest():
    files = {
        "0.bin": floats(0.5, -1.0, 2.0, 0.25),
        "1.bin": bytes(16),
        "2.bin": b"",
        "3.bin": b"\x01" * 48,
    }

    def tensor(role, file):
        data = files[file]
        return {"role": role, "file": file, "bytes": len(data),
                "crc32c": crc32c(data)}

    def var(name, dtype, shape, tensors, meta):
        return {"name": name, "dtype": dtype, "shape": shape, "meta": meta,
                "tensors": tensors}

    sgd = var("v", "float32", [4], [tensor("value", "0.bin")], {
        "spec": spec_json("v", "DT_FLOAT32", [4], "sgd"), "version": 3,
        "iterations": 3,
        "dedup": [{"job": "job", "worker": 0, "floor": 0, "steps": [0, 1, 2]}],
        "clocks": []})
    adam = var("m", "float32", [2, 2],
               [tensor("value", "0.bin"), tensor("m", "1.bin"),
                tensor("v", "1.bin")],
               {"spec": spec_json("m", "DT_FLOAT32", [2, 2], "adam"),
                "version": 1, "iterations": 1, "dedup": [], "clocks": []})
    ints = var("i", "int64", [2], [tensor("value", "1.bin")],
               {"spec": spec_json("i", "DT_INT64", [2], "assign_add"),
                "version": 0, "iterations": 0})
    empty = var("e", "float32", [0, 3], [tensor("value", "2.bin")],
                {"spec": spec_json("e", "DT_FLOAT32", [0, 3], "sgd")})
    stale = var("s", "float64", [2, 3], [tensor("value", "3.bin")],
                {"spec": spec_json("s", "DT_FLOAT64", [2, 3], "sgd",
                                   {"kind": "STALENESS", "num_replicas": 2,
                                    "staleness": 1}),
                 "version": 5, "iterations": 5,
                 "dedup": [{"job": "j", "worker": 1, "floor": 2,
                            "steps": [2, 4]}],
                 "clocks": [3, 5]})

    def manifest(variables, extra=None):
        return json.dumps({"format": "strata-checkpoint-v1",
                           "extra": extra or {"pushes_applied": 9},
                           "variables": variables}, indent=1).encode()

    bad_crc = dict(sgd, tensors=[dict(tensor("value", "0.bin"), crc32c=1)])
    return {
        "all-kinds": manifest([sgd, adam, ints, empty, stale]),
        "one-sgd": manifest([sgd]),
        "empty": manifest([]),
        "bad-crc": manifest([bad_crc]),
        "duplicate-name": manifest([sgd, sgd]),
        "missing-file": manifest([dict(sgd, tensors=[dict(
            tensor("value", "0.bin"), file="9.bin")])]),
        "wrong-format": json.dumps({"format": "other", "variables": []}).encode(),
    }


def job_json():
    seeds = {}
    for path in ("examples/fashion_mnist/job.json", "tests/data/small_job.json"):
        with open(os.path.join(REPO, path), "rb") as f:
            seeds[os.path.basename(os.path.dirname(path)) + "-" +
                  os.path.basename(path)] = f.read()
    csv_sync = {
        "name": "csv-sync",
        "model": {"input_shape": [4], "layers": [
            {"type": "flatten"},
            {"type": "dense", "units": 8, "activation": "tanh", "name": "h",
             "kernel_initializer": {"type": "random_normal", "stddev": 0.1}},
            {"type": "dropout", "rate": 0.2},
            {"type": "dense", "units": 1, "activation": "sigmoid"}]},
        "loss": "binary_crossentropy",
        "metrics": [],
        "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9,
                      "nesterov": True},
        "data": {"format": "csv", "train": {"path": "/tmp/train.csv",
                                            "label_column": 4,
                                            "header": False},
                 "test": {"path": "/tmp/test.csv"}},
        "strategy": {"type": "parameter_server", "update": "sync",
                     "sync_replicas": 2,
                     "partitioner": {"type": "min_size",
                                     "min_shard_bytes": 1024,
                                     "max_shards": 4}},
        "epochs": 2, "batch_size": 16,
        "evaluation": {"every_epochs": 1},
    }
    seeds["csv-sync"] = json.dumps(csv_sync, indent=1).encode()
    mse = dict(csv_sync, name="mse", loss="mean_squared_error",
               optimizer="rmsprop",
               strategy={"type": "parameter_server",
                         "partitioner": {"type": "max_size",
                                         "max_shard_bytes": 4096}},
               checkpoint={"every_seconds": 30})
    seeds["mse-max-size"] = json.dumps(mse).encode()
    seeds["malformed"] = b'{"name": "x", "model": {"layers": [}'
    seeds["wrong-type"] = b'{"name": 7, "epochs": "ten"}'

    # Limits of the job file (job/job_limits.h): at and just past each bound.
    with open(os.path.join(REPO, "tests/data/small_job.json")) as f:
        small = json.load(f)

    def variant(**changes):
        job = json.loads(json.dumps(small))
        for path, value in changes.items():
            *parents, leaf = path.split("__")
            node = job
            for p in parents:
                node = node[int(p)] if p.isdigit() else node[p]
            node[int(leaf) if leaf.isdigit() else leaf] = value
        return json.dumps(job, ensure_ascii=False).encode()

    seeds["device-cuda"] = variant(device="cuda:1")
    seeds["name-128"] = variant(name="n" * 128)
    seeds["name-129"] = variant(name="n" * 129)
    seeds["layer-name-129"] = variant(model__layers__0__name="l" * 129)
    seeds["long-enum-value"] = variant(loss="v" * 4000)
    seeds["path-4097"] = variant(data__train__images="/" + "p" * 4096)
    seeds["path-4096-two-byte-chars"] = variant(
        data__train__images="\u00e9" * 4096)
    keyed = json.loads(variant())
    keyed["k" * 4097] = 1
    seeds["key-4097"] = json.dumps(keyed).encode()
    seeds["units-1e12"] = variant(model__layers__0__units=10**12)
    seeds["units-int64-max"] = variant(model__layers__0__units=2**63 - 1)
    seeds["units-2e64"] = variant(model__layers__1__units=2**64)
    ceiling = {"model": {"input_shape": [1], "layers": [
        {"type": "dense", "units": 13743895347, "use_bias": False}]},
        "loss": "mse", "optimizer": {"type": "sgd", "momentum": 0.9},
        "data": {"format": "csv", "train": {"path": "train.csv"}},
        "batch_size": 1}
    seeds["model-at-ceiling"] = json.dumps(ceiling).encode()
    ceiling["model"]["layers"][0]["units"] += 1
    seeds["model-above-ceiling"] = json.dumps(ceiling).encode()
    seeds["deep-33"] = variant(evaluation=json.loads("[" * 32 + "1" + "]" * 32))
    seeds["brackets-33"] = b"[" * 33 + b"]" * 33
    seeds["brackets-in-strings"] = variant(
        loss="[" * 100 + '"' + "{" * 100)
    seeds["escaped-backslash-then-deep"] = (
        b'["\\\\", ' + b"[" * 32 + b"]" * 32 + b"]")
    seeds["unterminated-long-string"] = b'{"name": "' + b"a" * 2000
    return seeds


def tf_config():
    def cfg(cluster, task=None, env=None, **extra):
        d = {"cluster": cluster}
        if task is not None:
            d["task"] = task
        if env is not None:
            d["environment"] = env
        d.update(extra)
        return json.dumps(d).encode()

    kubeflow = {"chief": ["mnist-chief-0.kubeflow.svc:2222"],
                "ps": ["mnist-ps-0.kubeflow.svc:2222"],
                "worker": ["mnist-worker-0.kubeflow.svc:2222",
                           "mnist-worker-1.kubeflow.svc:2222"]}
    return {
        "kubeflow-worker": cfg(kubeflow, {"type": "worker", "index": 1}, "cloud"),
        "kubeflow-ps": cfg(kubeflow, {"type": "ps", "index": 0}),
        "evaluator": cfg({"worker": ["w:1"], "evaluator": ["e:2"]},
                         {"type": "evaluator", "index": 0}),
        "master-ipv6": cfg({"master": ["[::1]:2222"],
                            "worker": ["worker-0.example:2222"]},
                           {"type": "master", "index": 0}),
        "no-index-extra-key": cfg({"worker": ["w:1"]}, {"type": "worker"},
                                  rpc_layer="grpc"),
        "bad-index": cfg({"worker": ["w:1"]}, {"type": "worker", "index": "1"}),
        "two-chiefs": cfg({"chief": ["a:1", "b:2"]}),
        "address": b"127.0.0.1:5000",
        "address-ipv6": b"[::1]:0",
        "address-no-port": b"localhost",
    }


def chunk_codec():
    header = push_header("dense", DT_FLOAT32, [4, 3], 48, tag=push_tag())
    return {
        "header-and-data": b"\x00" + tensor_chunk(header, 0, floats(*[1.0] * 12)),
        "split-slices": b"\x1b" + tensor_chunk(header, 0, floats(*[2.0] * 12)),
        "data-at-offset": b"\x06" + tensor_chunk(b"", 1 << 20, b"\x07" * 40),
        "header-only": b"\x00" + tensor_chunk(header),
        "unknown-fields": b"\x39" + tensor_chunk(b"h", 5, b"d") +
        key(9, 0) + varint(3) + key(10, 5) + b"\x00\x01\x02\x03" +
        key(11, 1) + bytes(8) + f_bytes(12, b"skip"),
        "repeated-header": b"\x00" + tensor_chunk(b"a") + tensor_chunk(b"b"),
        "negative-offset": b"\x00" + key(2, 0) + varint(-5),
        "truncated-length": b"\x00" + key(3, 2) + varint(100) + b"abc",
    }


TARGETS = {
    "ps_create": ps_create,
    "ps_push": ps_push,
    "ps_pull": ps_pull,
    "ps_save_restore": ps_save_restore,
    "checkpoint_manifest": checkpoint_manifest,
    "job_json": job_json,
    "tf_config": tf_config,
    "chunk_codec": chunk_codec,
}


def main():
    for target, make in TARGETS.items():
        out = os.path.join(HERE, target)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for name, data in make().items():
            with open(os.path.join(out, "seed-" + name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(os.listdir(out))} seeds")


if __name__ == "__main__":
    main()
