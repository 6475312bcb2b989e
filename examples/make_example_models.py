#!/usr/bin/env python3
"""Writes the example jobs whose models are in Keras's model config JSON.

Each model is written as tf.keras 2.x's model.to_json() lays it out (or
Keras 3's, for the residual block), from small builders below that mirror
the Keras calls named in the comments. Run from the repository root:
    python3 examples/make_example_models.py
"""
import json
import os

GLOROT = {"class_name": "GlorotUniform", "config": {"seed": None}}
HE = {"class_name": "HeNormal", "config": {"seed": None}}
ZEROS = {"class_name": "Zeros", "config": {}}
ONES = {"class_name": "Ones", "config": {}}


def common(name):
    return {"name": name, "trainable": True, "dtype": "float32"}


def dense(name, units, activation="linear", use_bias=True, init=GLOROT):
    c = common(name)
    c.update({"units": units, "activation": activation, "use_bias": use_bias,
              "kernel_initializer": init, "bias_initializer": ZEROS,
              "kernel_regularizer": None, "bias_regularizer": None,
              "activity_regularizer": None, "kernel_constraint": None,
              "bias_constraint": None})
    return ("Dense", c)


def conv2d(name, filters, k, strides=1, padding="valid", activation="linear",
           use_bias=True):
    c = common(name)
    c.update({"filters": filters, "kernel_size": [k, k],
              "strides": [strides, strides], "padding": padding,
              "data_format": "channels_last", "dilation_rate": [1, 1],
              "groups": 1, "activation": activation, "use_bias": use_bias,
              "kernel_initializer": HE if not use_bias else GLOROT,
              "bias_initializer": ZEROS, "kernel_regularizer": None,
              "bias_regularizer": None, "activity_regularizer": None,
              "kernel_constraint": None, "bias_constraint": None})
    return ("Conv2D", c)


def batch_norm(name, momentum=0.99):
    c = common(name)
    c.update({"axis": [3], "momentum": momentum, "epsilon": 0.001,
              "center": True, "scale": True, "beta_initializer": ZEROS,
              "gamma_initializer": ONES, "moving_mean_initializer": ZEROS,
              "moving_variance_initializer": ONES, "beta_regularizer": None,
              "gamma_regularizer": None, "beta_constraint": None,
              "gamma_constraint": None})
    return ("BatchNormalization", c)


def simple(cls, name, **kw):
    c = common(name)
    c.update(kw)
    return (cls, c)


def input_layer(name, shape):
    return {"class_name": "InputLayer",
            "config": {"batch_input_shape": [None] + list(shape),
                       "dtype": "float32", "sparse": False, "ragged": False,
                       "name": name},
            "name": name, "inbound_nodes": []}


class Functional:
    """Records layer calls as tf.keras 2.x's Functional config does."""

    def __init__(self, name):
        self.name = name
        self.layers = []
        self.inputs = []
        self.calls = {}

    def input(self, name, shape):
        self.layers.append(input_layer(name, shape))
        self.inputs.append(name)
        return (name, 0)

    def __call__(self, layer, *tensors):
        cls, config = layer
        name = config["name"]
        entry = next((l for l in self.layers if l["name"] == name), None)
        if entry is None:
            entry = {"class_name": cls, "config": config, "name": name,
                     "inbound_nodes": []}
            self.layers.append(entry)
        node = len(entry["inbound_nodes"])
        entry["inbound_nodes"].append(
            [[t[0], t[1], 0, {}] for t in tensors])
        return (name, node)

    def to_json(self, outputs):
        return {"class_name": "Functional",
                "config": {"name": self.name, "layers": self.layers,
                           "input_layers": [[n, 0, 0] for n in self.inputs],
                           "output_layers": [[o[0], o[1], 0]
                                             for o in outputs]},
                "keras_version": "2.15.0", "backend": "tensorflow"}


def sequential(name, input_shape, layers):
    out = [{"class_name": "InputLayer",
            "config": {"batch_input_shape": [None] + list(input_shape),
                       "dtype": "float32", "sparse": False, "ragged": False,
                       "name": name + "_input"}}]
    for cls, config in layers:
        out.append({"class_name": cls, "config": config})
    return {"class_name": "Sequential",
            "config": {"name": name, "layers": out},
            "keras_version": "2.15.0", "backend": "tensorflow"}


FASHION_DATA = {
    "format": "idx",
    "train": {
        "images": "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
        "labels": "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"},
    "test": {
        "images": "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
        "labels": "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"},
    "scale": 255.0}


def fashion_job(name, model, loss, epochs, batch_size=64):
    return {"name": name, "model": model, "loss": loss,
            "metrics": ["accuracy"],
            "optimizer": {"type": "adam", "learning_rate": 0.001},
            "data": FASHION_DATA,
            "strategy": {"type": "multi_worker_mirrored"},
            "epochs": epochs, "batch_size": batch_size, "shuffle_seed": 42,
            "seed": 1, "evaluation": {"every_epochs": 1}}


def cnn():
    # TensorFlow's "Distributed training with Keras" guide:
    # Sequential([Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
    #             MaxPooling2D(), Flatten(), Dense(64, activation='relu'),
    #             Dense(10)]), SparseCategoricalCrossentropy(from_logits=True)
    model = sequential("sequential", [28, 28, 1], [
        conv2d("conv2d", 32, 3, activation="relu"),
        simple("MaxPooling2D", "max_pooling2d", pool_size=[2, 2],
               padding="valid", strides=[2, 2], data_format="channels_last"),
        simple("Flatten", "flatten", data_format="channels_last"),
        dense("dense", 64, "relu"),
        dense("dense_1", 10)])
    return fashion_job("fashion-mnist-cnn", model,
                       {"name": "sparse_categorical_crossentropy",
                        "from_logits": True}, 5)


def resnet_block():
    # x = Conv2D(16, 3, strides=2, padding='same', activation='relu')(image)
    # two blocks of: y = Conv2D(16, 3, padding='same', use_bias=False)(x)
    #   y = BatchNormalization()(y); y = Activation('relu')(y)
    #   y = Conv2D(16, 3, padding='same', use_bias=False)(y)
    #   y = BatchNormalization()(y); x = Activation('relu')(Add()([x, y]))
    # GlobalAveragePooling2D(), Dense(10, activation='softmax')
    f = Functional("resnet_block")
    x = f.input("image", [28, 28, 1])
    x = f(conv2d("stem", 16, 3, strides=2, padding="same",
                 activation="relu"), x)
    for b in range(2):
        y = f(conv2d(f"block{b}_conv1", 16, 3, padding="same",
                     use_bias=False), x)
        y = f(batch_norm(f"block{b}_bn1", momentum=0.9), y)
        y = f(simple("Activation", f"block{b}_relu1", activation="relu"), y)
        y = f(conv2d(f"block{b}_conv2", 16, 3, padding="same",
                     use_bias=False), y)
        y = f(batch_norm(f"block{b}_bn2", momentum=0.9), y)
        x = f(simple("Add", f"block{b}_add"), x, y)
        x = f(simple("Activation", f"block{b}_out", activation="relu"), x)
    x = f(simple("GlobalAveragePooling2D", "pool",
                 data_format="channels_last", keepdims=False), x)
    out = f(dense("predictions", 10, "softmax"), x)
    return fashion_job("fashion-mnist-resnet-block", f.to_json([out]),
                       "sparse_categorical_crossentropy", 5)


EMBED_DIM = 8
COLUMNS = 26


def criteo_job(name, keras, inputs=None):
    # inputs: each Keras input's sources ("dense", table names); None binds
    # the inputs by their names (DLRM's are "dense" and the tables').
    embeddings = [{"table": f"C{c + 1}", "columns": [c],
                   "output_dim": EMBED_DIM, "min_count": 2}
                  for c in range(COLUMNS)]
    model = {"keras": keras, "categorical_columns": COLUMNS,
             "embeddings": embeddings}
    if inputs is not None:
        model["inputs"] = inputs
    return {"name": name,
            "model": model,
            "loss": "binary_crossentropy", "metrics": ["accuracy", "auc"],
            "optimizer": {"type": "adam", "learning_rate": 0.001},
            "data": {"format": "criteo",
                     "train": {"path": "/tmp/strata-criteo/train.tsv"},
                     "test": {"path": "/tmp/strata-criteo/test.tsv"},
                     "bad_lines": "stop"},
            "strategy": {"type": "parameter_server"},
            "epochs": 2, "batch_size": 256, "seed": 1}


# The two-input models' binding: the dense columns, and all 26 tables'
# embeddings side by side.
DENSE_AND_TABLES = {"dense": "dense",
                    "embeddings": [f"C{c + 1}" for c in range(COLUMNS)]}


def dlrm():
    # DLRM: bottom MLP over the 13 dense columns to EMBED_DIM, the 26
    # embeddings (one input each), DotInteraction over all 27 vectors,
    # concatenated with the bottom output, top MLP to one sigmoid.
    f = Functional("dlrm")
    dense_in = f.input("dense", [13])
    sparse = [f.input(f"C{c + 1}", [EMBED_DIM]) for c in range(COLUMNS)]
    b = f(dense("bottom_0", 64, "relu"), dense_in)
    b = f(dense("bottom_1", EMBED_DIM, "relu"), b)
    inter = f(simple("DotInteraction", "interaction", self_interaction=False,
                     skip_gather=False), b, *sparse)
    t = f(simple("Concatenate", "concat", axis=-1), b, inter)
    t = f(dense("top_0", 64, "relu"), t)
    t = f(dense("top_1", 32, "relu"), t)
    out = f(dense("ctr", 1, "sigmoid"), t)
    return criteo_job("criteo_like_dlrm", f.to_json([out]))


def dcn():
    # DCN-v2: x0 = Concatenate()([dense, embeddings]); two Cross layers
    # (low rank 32), then Dense(64, relu), Dense(1, sigmoid).
    f = Functional("dcn_v2")
    dense_in = f.input("dense", [13])
    emb = f.input("embeddings", [COLUMNS * EMBED_DIM])
    x0 = f(simple("Concatenate", "x0", axis=-1), dense_in, emb)
    cross_cfg = {"projection_dim": 32, "diag_scale": 0.0, "use_bias": True,
                 "preactivation": None,
                 "kernel_initializer": {"class_name": "TruncatedNormal",
                                        "config": {"mean": 0.0,
                                                   "stddev": 0.05,
                                                   "seed": None}},
                 "bias_initializer": ZEROS, "kernel_regularizer": None,
                 "bias_regularizer": None}
    x1 = f(simple("Cross", "cross_1", **cross_cfg), x0)
    x2 = f(simple("Cross", "cross_2", **cross_cfg), x0, x1)
    d = f(dense("deep_0", 64, "relu"), x2)
    out = f(dense("ctr", 1, "sigmoid"), d)
    return criteo_job("criteo_like_dcn", f.to_json([out]), DENSE_AND_TABLES)


def wide_deep():
    # Wide & deep with two inputs: a linear model of the dense columns
    # (wide) plus an MLP of the dense columns and embeddings (deep), summed
    # into one logit.
    f = Functional("wide_and_deep")
    dense_in = f.input("dense", [13])
    emb = f.input("embeddings", [COLUMNS * EMBED_DIM])
    wide = f(dense("wide", 1), dense_in)
    d = f(simple("Concatenate", "deep_in", axis=-1), dense_in, emb)
    d = f(dense("deep_0", 64, "relu"), d)
    d = f(dense("deep_1", 32, "relu"), d)
    d = f(dense("deep_logit", 1), d)
    logit = f(simple("Add", "logit"), wide, d)
    out = f(simple("Activation", "ctr", activation="sigmoid"), logit)
    return criteo_job("criteo_like_wide_deep", f.to_json([out]),
                      DENSE_AND_TABLES)


def write(path, job):
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    os.makedirs("examples/fashion_mnist", exist_ok=True)
    write("examples/fashion_mnist/cnn.json", cnn())
    write("examples/fashion_mnist/resnet_block.json", resnet_block())
    write("examples/criteo_like/dlrm.json", dlrm())
    write("examples/criteo_like/dcn.json", dcn())
    write("examples/criteo_like/wide_deep.json", wide_deep())
