"""Keras's model APIs over the C++ layer graph: the functional API, subclassed
models, every runtime layer under keras.layers with Keras's arguments, the
summary, to_json / model_from_json, and saving (.keras, .weights.h5)."""
import json

import numpy as np
import pytest

import strata as tf
from strata import errors

from _helpers import needs_fashion, toy

keras = tf.keras
layers = tf.keras.layers


def two_input_model():
    a = keras.Input(shape=(1,), name="a")
    b = keras.Input(shape=(1,), name="b")
    h = layers.Concatenate()([a, b])
    h = layers.Dense(16, activation="relu", name="hidden")(h)
    h = layers.BatchNormalization(name="bn")(h)
    out = layers.Dense(2, name="logits")(h)
    return keras.Model(inputs=[a, b], outputs=out, name="two_inputs")


def test_functional_model_with_two_inputs_trains_on_lists_and_dicts(capsys):
    model = two_input_model()
    assert [l.name for l in model.layers] == ["a", "b", "concatenate", "hidden", "bn",
                                              "logits"] or \
        [l.name for l in model.layers][:2] == ["a", "b"]
    assert model.get_layer("bn").name == "bn"
    assert model.get_layer(index=3).name == "hidden"
    with pytest.raises(ValueError, match="No such layer: nope"):
        model.get_layer("nope")
    assert model.outputs[0].shape == (None, 2)
    # The summary is there before compile: 2*16+16, 4*16 (32 non-trainable), 16*2+2.
    model.summary()
    text = capsys.readouterr().out
    assert "bn (BatchNormalization)" in text and "Connected to" in text
    assert "Total params: 146" in text and "Trainable params: 114" in text
    assert "Non-trainable params: 32" in text
    assert model.count_params() == 146
    # The output is logits: the loss must say so.
    with pytest.raises(errors.InvalidArgumentError, match="from_logits"):
        model.compile("adam", "sparse_categorical_crossentropy")
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = toy()
    h = model.fit([x[:, :1], x[:, 1:]], y, epochs=5, verbose=0,
                  validation_data=([x[:200, :1], x[:200, 1:]], y[:200]))
    assert h.history["val_accuracy"][-1] > 0.9
    xt, yt = toy(500, 1)
    loss, acc = model.evaluate({"a": xt[:, :1], "b": xt[:, 1:]}, yt, verbose=0)
    assert acc > 0.9
    assert model.predict([xt[:7, :1], xt[:7, 1:]]).shape == (7, 2)
    with pytest.raises(ValueError, match="no data for input"):
        model.predict({"a": xt[:, :1]})
    with pytest.raises(ValueError, match="2 inputs"):
        model.predict(xt)
    # Keras's order: per layer its trainable weights, then its non-trainable.
    shapes = [w.shape for w in model.get_weights()]
    assert shapes == [(2, 16), (16,), (16,), (16,), (16,), (16,), (16, 2), (2,)]
    assert len(model.trainable_weights) == 6 and len(model.non_trainable_weights) == 2
    # The moving variance trained away from its initial ones.
    assert not np.allclose(model.non_trainable_weights[1], 1.0)


def test_layers_name_bad_arguments_as_keras_does():
    with pytest.raises(ValueError, match="`padding`"):
        layers.Conv2D(4, 3, padding="full")
    with pytest.raises(ValueError, match="`filters`"):
        layers.Conv2D(0, 3)
    with pytest.raises(ValueError, match="`kernel_size`"):
        layers.Conv2D(4, (3, 3, 3))
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'units'"):
        layers.Dense()
    with pytest.raises(TypeError, match="Keyword argument not understood: 'unit'"):
        layers.Dense(4, unit=3)
    with pytest.raises(ValueError, match="`kernel_initializer`"):
        layers.Dense(4, kernel_initializer="orthogonal_typo")
    with pytest.raises(ValueError, match="`kernel_regularizer`"):
        layers.Dense(4, kernel_regularizer="l3")
    with pytest.raises(ValueError, match="Unknown activation function: 'relux'"):
        layers.Activation("relux")
    with pytest.raises(ValueError, match="`data_format`"):
        layers.MaxPooling2D(data_format="channels_first")
    with pytest.raises(ValueError, match="`projection_dim`"):
        layers.Cross(projection_dim=0)
    # What only the shapes tell is refused at the call, naming the layer.
    x = keras.Input(shape=(784,))
    with pytest.raises(errors.InvalidArgumentError, match=r"layer 'c' \(Conv2D\)"):
        layers.Conv2D(4, 3, name="c")(x)
    with pytest.raises(errors.InvalidArgumentError, match="Reshape"):
        layers.Reshape((27, 28, 1))(x)
    with pytest.raises(TypeError, match="called on ndarray"):
        layers.Dense(3)(np.zeros((2, 3)))
    a, b = keras.Input(shape=(3,)), keras.Input(shape=(4,))
    with pytest.raises(errors.InvalidArgumentError, match="Add"):
        layers.Add()([a, b])
    c = keras.Input(shape=(2,))
    with pytest.raises(ValueError, match="Graph disconnected"):
        keras.Model(inputs=a, outputs=layers.Dense(1)(c))


def test_every_runtime_layer_builds_with_keras_defaults():
    img = keras.Input(shape=(8, 8, 3))
    seq = keras.Input(shape=(6, 4))
    vec = keras.Input(shape=(5,))
    ids = keras.Input(shape=(3,), dtype="int32")
    shapes = {
        "Conv2D": layers.Conv2D(2, 3, strides=2, padding="same", dilation_rate=1)(img),
        "Conv1D": layers.Conv1D(3, 2)(seq),
        "MaxPooling2D": layers.MaxPooling2D()(img),
        "AveragePooling2D": layers.AveragePooling2D(pool_size=(2, 2), strides=1)(img),
        "MaxPooling1D": layers.MaxPooling1D()(seq),
        "AveragePooling1D": layers.AveragePooling1D(padding="same")(seq),
        "GlobalAveragePooling2D": layers.GlobalAveragePooling2D()(img),
        "GlobalMaxPooling2D": layers.GlobalMaxPooling2D()(img),
        "GlobalAveragePooling1D": layers.GlobalAveragePooling1D()(seq),
        "GlobalMaxPooling1D": layers.GlobalMaxPooling1D()(seq),
        "BatchNormalization": layers.BatchNormalization()(img),
        "LayerNormalization": layers.LayerNormalization()(vec),
        "Activation": layers.Activation("gelu")(vec),
        "Dropout": layers.Dropout(0.5)(vec),
        "Flatten": layers.Flatten()(img),
        "Reshape": layers.Reshape((5, 1))(vec),
        "Dense": layers.Dense(4, kernel_regularizer=keras.regularizers.l2(1e-4),
                              kernel_initializer=keras.initializers.HeNormal(seed=3))(vec),
        "Embedding": layers.Embedding(10, 4)(ids),
        "Add": layers.Add()([vec, vec]),
        "Multiply": (vec * vec),
        "Concatenate": layers.concatenate([vec, vec]),
        "Dot": layers.Dot(axes=1)([vec, vec]),
        "DotInteraction": layers.DotInteraction()([vec, vec, vec]),
        "Cross": layers.Cross(projection_dim=2)(vec),
    }
    expect = {"Conv2D": (4, 4, 2), "Conv1D": (5, 3), "MaxPooling2D": (4, 4, 3),
              "AveragePooling2D": (7, 7, 3), "MaxPooling1D": (3, 4),
              "AveragePooling1D": (3, 4), "GlobalAveragePooling2D": (3,),
              "GlobalMaxPooling2D": (3,), "GlobalAveragePooling1D": (4,),
              "GlobalMaxPooling1D": (4,), "BatchNormalization": (8, 8, 3),
              "LayerNormalization": (5,), "Activation": (5,), "Dropout": (5,),
              "Flatten": (192,), "Reshape": (5, 1), "Dense": (4,), "Embedding": (3, 4),
              "Add": (5,), "Multiply": (5,), "Concatenate": (10,), "Dot": (1,),
              "DotInteraction": (3,), "Cross": (5,)}
    for name, t in shapes.items():
        assert t.shape == (None,) + expect[name], name
    conv = layers.Conv2D(8, 3)
    cfg = conv.get_config()
    assert cfg["kernel_size"] == [3, 3] and cfg["strides"] == [1, 1]
    assert cfg["padding"] == "valid" and cfg["activation"] == "linear"
    assert cfg["kernel_initializer"] == {"class_name": "GlorotUniform",
                                         "config": {"seed": None}}
    bn = layers.BatchNormalization()
    assert (bn.momentum, bn.epsilon, bn.axis) == (0.99, 0.001, -1)


@needs_fashion
def test_a_cnn_trains_on_fashion_mnist_and_saves_and_loads(tmp_path):
    (x, y), (xt, yt) = keras.datasets.fashion_mnist.load_data()
    x, y = x[:4000].astype("float32") / 255.0, y[:4000]
    xt, yt = xt[:1000].astype("float32") / 255.0, yt[:1000]
    model = keras.Sequential([
        keras.Input(shape=(28, 28)),
        layers.Reshape((28, 28, 1)),
        layers.Conv2D(8, 3, activation="relu"),
        layers.BatchNormalization(),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)
    _, acc = model.evaluate(xt, yt, verbose=0)
    assert acc > 0.7
    before = model.predict(xt[:50])
    path = str(tmp_path / "cnn.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(xt[:50]), before, rtol=1e-5, atol=1e-6)
    assert [l.name for l in loaded.layers] == [l.name for l in model.layers]
    assert loaded.evaluate(xt, yt, verbose=0)[1] == pytest.approx(acc, abs=1e-6)
    # The weights alone, into a model built again.
    wpath = str(tmp_path / "cnn.weights.h5")
    model.save_weights(wpath)
    again = keras.models.model_from_json(model.to_json())
    again.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    again.load_weights(wpath)
    np.testing.assert_allclose(again.predict(xt[:50]), before, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=".keras"):
        model.save(str(tmp_path / "saved_model_dir"))


def test_to_json_round_trips_and_reads_keras3_configs():
    model = two_input_model()
    config = json.loads(model.to_json())
    assert config["class_name"] == "Functional"
    assert config["config"]["input_layers"] == [["a", 0, 0], ["b", 0, 0]]
    again = keras.models.model_from_json(model.to_json())
    assert json.loads(again.to_json())["config"] == config["config"]
    assert keras.Model.from_config(model.get_config()).count_params() == 146
    # Keras 3's layout: batch_shape, {"args", "kwargs"} nodes of __keras_tensor__.
    def tensor(name):
        return {"class_name": "__keras_tensor__",
                "config": {"shape": [None, 4], "dtype": "float32",
                           "keras_history": [name, 0, 0]}}
    k3 = {"module": "keras", "class_name": "Functional", "registered_name": None,
          "config": {"name": "k3", "layers": [
              {"module": "keras.layers", "class_name": "InputLayer", "name": "x",
               "config": {"batch_shape": [None, 4], "dtype": "float32", "name": "x"},
               "inbound_nodes": []},
              {"module": "keras.layers", "class_name": "Dense", "name": "d",
               "config": {"name": "d", "units": 3, "activation": "softmax",
                          "dtype": {"module": "keras", "class_name": "DTypePolicy",
                                    "config": {"name": "float32"}}},
               "build_config": {"input_shape": [None, 4]},
               "inbound_nodes": [{"args": [tensor("x")], "kwargs": {}}]}],
              "input_layers": [["x", 0, 0]], "output_layers": [["d", 0, 0]]}}
    m3 = keras.models.model_from_json(json.dumps(k3))
    assert m3.outputs[0].shape == (None, 3) and m3.count_params() == 15


def test_shared_layers_and_subclassed_models():
    shared = layers.Dense(8, activation="relu", name="shared")
    a, b = keras.Input(shape=(2,), name="a"), keras.Input(shape=(2,), name="b")
    merged = layers.Add()([shared(a), shared(b)])
    model = keras.Model([a, b], layers.Dense(2, activation="softmax")(merged))
    assert model.count_params() == 2 * 8 + 8 + 8 * 2 + 2
    cfg = json.loads(model.to_json())["config"]
    shared_entry = [l for l in cfg["layers"] if l["name"] == "shared"][0]
    assert len(shared_entry["inbound_nodes"]) == 2
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = toy()
    model.fit([x, x[:, ::-1] * 0 + x], y, epochs=3, verbose=0)

    class Mlp(keras.Model):
        def __init__(self):
            super().__init__(name="mlp")
            self.hidden = layers.Dense(16, activation="relu")
            self.out = layers.Dense(2, activation="softmax")

        def call(self, inputs):
            return self.out(self.hidden(inputs))

    mlp = Mlp()
    with pytest.raises(ValueError, match="not been built"):
        mlp.summary()
    mlp.build((None, 2))
    mlp.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                metrics=["accuracy"])
    h = mlp.fit(x, y, epochs=5, verbose=0)
    assert h.history["accuracy"][-1] > 0.9
    assert mlp.count_params() == 2 * 16 + 16 + 16 * 2 + 2


def test_sequential_add_pop_and_graph_path_weights(tmp_path):
    model = keras.Sequential(name="stack")
    model.add(keras.Input(shape=(4,)))
    model.add(layers.Dense(8, activation="gelu"))
    model.add(layers.Dense(3))
    model.pop()
    model.add(layers.Dense(3, activation="softmax"))
    assert len(model.layers) == 2
    assert json.loads(model.to_json())["class_name"] == "Sequential"
    model.compile("sgd", "sparse_categorical_crossentropy")
    w = model.get_weights()
    assert [a.shape for a in w] == [(4, 8), (8,), (8, 3), (3,)]
    model.set_weights([np.ones_like(a) for a in w])
    assert all(np.all(a == 1) for a in model.get_weights())
    with pytest.raises(ValueError, match=r"expects \(8, 3\)"):
        model.set_weights([w[0], w[1], w[2].T, w[3]])


@pytest.mark.parametrize("make", [
    lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
    lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
], ids=["one_device", "mirrored"])
def test_save_and_load_round_trip_under_a_strategy(tmp_path, make):
    strategy = make()
    with strategy.scope():
        model = two_input_model()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = toy()
    model.fit([x[:, :1], x[:, 1:]], y, epochs=2, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    with strategy.scope():
        loaded = keras.models.load_model(path)
    assert loaded.distribute_strategy is strategy or \
        type(loaded.distribute_strategy) is type(strategy)
    xs = [x[:20, :1], x[:20, 1:]]
    np.testing.assert_allclose(loaded.predict(xs), model.predict(xs), rtol=1e-5,
                               atol=1e-6)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_train_test_and_predict_on_batch():
    model = two_input_model()
    model.compile(keras.optimizers.SGD(0.5),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = toy(256)
    xs = [x[:, :1], x[:, 1:]]
    before = model.test_on_batch(xs, y, return_dict=True)
    assert set(before) == {"loss", "accuracy"}
    losses = [model.train_on_batch(xs, y)[0] for _ in range(30)]
    assert losses[-1] < losses[0]
    after = model.test_on_batch(xs, y)
    assert after[0] < before["loss"]
    assert model.predict_on_batch(xs).shape == (256, 2)


def test_metrics_computed_over_the_predictions():
    x, y = toy(2000)
    xt, yt = toy(500, 3)
    model = keras.Sequential([layers.Dense(16, activation="relu", input_shape=(2,)),
                              layers.Dense(1, activation="sigmoid")])
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy",
                  metrics=["accuracy", keras.metrics.AUC(), "precision",
                           keras.metrics.Recall(), keras.metrics.BinaryAccuracy(
                               threshold=0.9, name="sure")])
    h = model.fit(x, y, epochs=3, verbose=0, validation_data=(xt, yt))
    assert {"auc", "precision", "recall", "sure", "val_auc", "val_recall"} <= set(h.history)
    assert len(h.history["val_auc"]) == 3 and h.history["auc"][-1] > 0.95
    logs = model.evaluate(xt, yt, verbose=0, return_dict=True)
    p = model.predict(xt).reshape(-1)
    pos, neg = p[yt == 1], p[yt == 0]
    auc = float(np.mean(pos[:, None] > neg[None, :]) +
                0.5 * np.mean(pos[:, None] == neg[None, :]))
    assert logs["auc"] == pytest.approx(auc, abs=1e-9)
    tp = np.sum((p > 0.5) & (yt == 1))
    assert logs["precision"] == pytest.approx(tp / np.sum(p > 0.5))
    assert logs["recall"] == pytest.approx(tp / np.sum(yt == 1))
    assert logs["sure"] == pytest.approx(np.mean((p > 0.9) == (yt == 1)))
    # Top-k and errors of a logits model: on the outputs as they are, as
    # Keras's metrics see them.
    m = keras.Sequential([layers.Dense(3, input_shape=(2,))])
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=[keras.metrics.SparseTopKCategoricalAccuracy(k=2), "mse"])
    logs = m.evaluate(x[:100], y[:100], verbose=0, return_dict=True)
    z = m.predict(x[:100])
    top2 = np.argsort(-z, axis=1)[:, :2]
    assert logs["sparse_top_k_categorical_accuracy"] == pytest.approx(
        np.mean((top2 == y[:100, None]).any(axis=1)))
    assert logs["mse"] == pytest.approx(np.mean((z - np.eye(3)[y[:100]]) ** 2))
    # A threshold on logits: BinaryAccuracy(threshold=0.0) of a from_logits model.
    b = keras.Sequential([layers.Dense(1, input_shape=(2,))])
    b.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=keras.metrics.BinaryAccuracy(threshold=0.0))
    logs = b.evaluate(x[:100], y[:100], verbose=0, return_dict=True)
    zb = b.predict(x[:100]).reshape(-1)
    assert logs["binary_accuracy"] == pytest.approx(np.mean((zb > 0) == (y[:100] == 1)))
    with pytest.raises(ValueError, match="Could not interpret metric"):
        m.compile("adam", "mse", metrics=["f1_typo"])


def test_save_keeps_the_optimizer_state(tmp_path):
    x, y = toy(512)
    xs = [x[:, :1], x[:, 1:]]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = two_input_model()
    model.compile(keras.optimizers.Adam(0.01), loss, metrics=["accuracy"])
    model.fit(xs, y, epochs=1, verbose=0)
    saved = model.get_weights()
    path = str(tmp_path / "adam.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    # Adam's iterations and moments came back: the next steps are the same,
    # to the bit (one-example batches: no order inside a batch to differ).
    for i in range(3):
        one = [a[i:i + 1] for a in xs]
        model.train_on_batch(one, y[i:i + 1])
        loaded.train_on_batch(one, y[i:i + 1])
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    # The weights alone (a fresh Adam) step elsewhere.
    fresh = keras.models.model_from_json(model.to_json())
    fresh.compile(keras.optimizers.Adam(0.01), loss)
    fresh.set_weights(saved)
    for i in range(3):
        fresh.train_on_batch([a[i:i + 1] for a in xs], y[i:i + 1])
    assert np.abs(fresh.get_weights()[0] - model.get_weights()[0]).max() > 1e-4


def test_metric_objects_standalone():
    acc = keras.metrics.SparseCategoricalAccuracy()
    acc.update_state([0, 1], [[0.9, 0.1], [0.8, 0.2]])
    acc.update_state([1], [[0.1, 0.9]])
    assert acc.result() == pytest.approx(2 / 3)
    acc.reset_state()
    assert acc.result() == 0
    mean = keras.metrics.Mean(name="train_loss")
    mean.update_state(2.0)
    mean(np.array([4.0, 6.0]))
    assert mean.result() == pytest.approx(4.0)
    auc = keras.metrics.AUC()
    auc.update_state([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    assert auc.result() == pytest.approx(0.75)
    assert keras.metrics.BinaryAccuracy()([1, 0], [0.7, 0.2]) == 1.0
    with pytest.raises(ValueError, match="sample_weight"):
        acc.update_state([0], [[1.0, 0.0]], sample_weight=[2.0])
    model = keras.Sequential([layers.Dense(2, input_shape=(2,))])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    keras.backend.set_value(model.optimizer.lr, 0.05)
    assert keras.backend.get_value(model.optimizer.lr) == pytest.approx(0.05)
    assert model._native.learning_rate == pytest.approx(0.05)


def test_review_fixes_keras_semantics(tmp_path):
    x, y = toy(600)
    # A feature extractor of a trained model's layer starts from its weights.
    inp = keras.Input(shape=(2,))
    feat = layers.Dense(8, activation="relu", name="feat")(inp)
    m = keras.Model(inp, layers.Dense(2)(feat))
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(x, y, epochs=1, verbose=0)
    kernel, bias = m.get_layer("feat").get_weights()
    sub = keras.Model(m.inputs, m.get_layer("feat").output)
    np.testing.assert_allclose(sub(x[:5]), np.maximum(x[:5] @ kernel + bias, 0),
                               atol=1e-5)
    np.testing.assert_array_equal(m.get_layer("feat").get_weights()[0], kernel)
    # pop / add keep the remaining layers' trained weights.
    s = keras.Sequential([layers.Dense(8, activation="relu", input_shape=(2,)),
                          layers.Dense(2)])
    s.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    s.fit(x, y, epochs=1, verbose=0)
    base = s.layers[0].get_weights()[0].copy()
    s.pop()
    s.add(layers.Dense(3))
    s.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    np.testing.assert_array_equal(s.layers[0].get_weights()[0], base)
    # One metric as such; metrics_names and logs in compile order; the
    # learning rate and metric objects survive save / load.
    b = keras.Sequential([layers.Dense(4, activation="relu", input_shape=(2,)),
                          layers.Dense(1, activation="sigmoid")])
    b.compile(keras.optimizers.Adam(0.01), "binary_crossentropy",
              metrics=[keras.metrics.AUC(), "accuracy",
                       keras.metrics.BinaryAccuracy(threshold=0.7, name="sure")])
    assert b.metrics_names == ["loss", "auc", "accuracy", "sure"]
    assert list(b.evaluate(x, y, verbose=0, return_dict=True)) == b.metrics_names
    b.optimizer.learning_rate = 0.5
    b.save(str(tmp_path / "b.keras"))
    again = keras.models.load_model(str(tmp_path / "b.keras"))
    assert float(again.optimizer.learning_rate) == pytest.approx(0.5)
    assert again.metrics_names == b.metrics_names
    assert again.evaluate(x, y, verbose=0, return_dict=True)["sure"] == pytest.approx(
        b.evaluate(x, y, verbose=0, return_dict=True)["sure"])
    one = keras.Sequential([layers.Dense(2, input_shape=(2,), activation="softmax")])
    one.compile("adam", "sparse_categorical_crossentropy", metrics="accuracy")
    assert one.metrics_names == ["loss", "accuracy"]
    # Loaded without compile: predict and weights need none.
    plain = keras.models.load_model(str(tmp_path / "b.keras"), compile=False)
    np.testing.assert_allclose(plain.predict(x[:5]), b.predict(x[:5]), rtol=1e-6)
    # A whole-model checkpoint by default for a .keras path.
    ck = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "c{epoch}.keras"))
    one.fit(x, y, epochs=1, verbose=0, callbacks=[ck])
    assert keras.models.load_model(str(tmp_path / "c1.keras")).count_params() == 6
    # Dict inputs keyed as the model's inputs were given.
    p, q = keras.Input(shape=(1,), name="zz_p"), keras.Input(shape=(1,), name="aa_q")
    dm = keras.Model({"p": p, "q": q},
                     layers.Dense(2)(layers.concatenate([p, q])))
    dm.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out = dm.predict({"p": x[:4, :1], "q": x[:4, 1:]})
    kernel, bias = dm.get_weights()
    np.testing.assert_allclose(out, x[:4, [0, 1]] @ kernel + bias, atol=1e-5)


def test_mae_and_huber_losses_train_save_and_compute_as_keras(tmp_path):
    # Called on arrays: Keras's formulas against the one-hot labels.
    y_true = [0, 1]
    y_pred = np.array([[0.2, 0.9], [1.5, -0.5]], np.float32)
    d = y_pred - np.eye(2)
    assert keras.losses.MeanAbsoluteError()(y_true, y_pred) == pytest.approx(np.abs(d).mean())
    h = keras.losses.Huber(delta=0.5)
    a = np.abs(d)
    want = np.where(a <= 0.5, 0.5 * d * d, 0.5 * (a - 0.25)).mean()
    assert h(y_true, y_pred) == pytest.approx(want)
    assert keras.losses.get("mean_absolute_error") == "mae"
    assert keras.losses.get("huber_loss") == "huber"
    with pytest.raises(ValueError, match="delta"):
        keras.losses.Huber(delta=0)
    # fit with each: the runtime's loss is the same number.
    x, y = toy(512)
    for loss in ("mae", keras.losses.Huber(delta=0.5)):
        model = keras.Sequential([layers.Dense(2, input_shape=(2,))])
        model.compile(keras.optimizers.SGD(0.1), loss)
        before = model.evaluate(x, y, verbose=0)
        model.fit(x, y, batch_size=64, epochs=3, verbose=0)
        after = model.evaluate(x, y, verbose=0)
        assert after < before
        fn = keras.losses.MeanAbsoluteError() if loss == "mae" else loss
        assert fn(y, model.predict(x, verbose=0)) == pytest.approx(after, rel=1e-4)
    # The delta survives a save and a load.
    path = str(tmp_path / "huber.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.loss, keras.losses.Huber)
    assert loaded.loss.delta == 0.5
    assert loaded.evaluate(x, y, verbose=0) == pytest.approx(after, rel=1e-5)
