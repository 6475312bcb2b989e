"""keras.layers.Embedding (with Flatten or GlobalAveragePooling1D) over
integer ids, here and on a local parameter-server cluster, against the same
model in torch."""
import numpy as np
import pytest

import strata as tf
from strata import errors

VOCAB, LENGTH = 300, 6


def clicks(n, seed=0):
    """Ids and 0/1 labels from a hidden per-id weight (a click model): the
    label is 1 when the ids' weights sum above 0, flipped for 5% of rows."""
    rng = np.random.default_rng(seed)
    weight = np.random.default_rng(99).normal(size=VOCAB)
    x = rng.integers(0, VOCAB, size=(n, LENGTH))
    y = (weight[x].sum(axis=1) > 0).astype(np.int64)
    flip = rng.random(n) < 0.05
    y[flip] = 1 - y[flip]
    return x, y


def embedding_model(pooling, optimizer=None, length=LENGTH):
    model = tf.keras.Sequential([
        tf.keras.layers.Embedding(VOCAB, 8, input_length=length),
        tf.keras.layers.Flatten() if pooling == "flatten"
        else tf.keras.layers.GlobalAveragePooling1D(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(0.01),
                  loss="binary_crossentropy", metrics=["accuracy"])
    return model


def torch_accuracy(pooling, x, y, xt, yt, epochs):
    """The same model, data order and batch size in torch (Adam 0.01)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    emb = torch.nn.Embedding(VOCAB, 8)
    torch.nn.init.uniform_(emb.weight, -0.05, 0.05)
    width = 8 * LENGTH if pooling == "flatten" else 8
    mlp = torch.nn.Sequential(torch.nn.Linear(width, 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 1), torch.nn.Sigmoid())

    def forward(ids):
        e = emb(torch.as_tensor(ids))
        return mlp(e.reshape(len(ids), -1) if pooling == "flatten" else e.mean(dim=1))

    opt = torch.optim.Adam(list(emb.parameters()) + list(mlp.parameters()), lr=0.01)
    for _ in range(epochs):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            p = forward(x[i:i + 64]).reshape(-1)
            loss = torch.nn.functional.binary_cross_entropy(
                p, torch.as_tensor(y[i:i + 64], dtype=torch.float32))
            loss.backward()
            opt.step()
    with torch.no_grad():
        p = forward(xt).reshape(-1).numpy()
    return float(((p > 0.5) == (yt == 1)).mean())


@pytest.mark.parametrize("pooling", ["flatten", "mean"])
def test_embedding_learns_as_torch_does(pooling):
    x, y = clicks(12000)
    xt, yt = clicks(3000, seed=1)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = embedding_model(pooling)
    h = model.fit(x, y, batch_size=64, epochs=3, validation_data=(xt, yt),
                  shuffle=False, verbose=0)
    assert sorted(h.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    ours = h.history["val_accuracy"][-1]
    theirs = torch_accuracy(pooling, x, y, xt, yt, epochs=3)
    # Flatten keeps each position's row apart; the mean mixes them and still
    # separates a sum of per-id weights. Both learn it about as torch does.
    assert ours > 0.8, (ours, theirs)
    assert abs(ours - theirs) < 0.04, (ours, theirs)
    loss, acc = model.evaluate(xt, yt, verbose=0)
    assert abs(acc - ours) < 1e-9
    p = model.predict(xt[:5], verbose=0)
    assert p.shape == (5, 1) and np.all((p > 0) & (p < 1))
    # predict and evaluate read the same rows.
    full = model.predict(xt, verbose=0).reshape(-1)
    assert abs(float(((full > 0.5) == (yt == 1)).mean()) - acc) < 1e-9
    # The table holds the touched rows; get_weights the dense layers'.
    [(table, rows)] = model._native.table_rows()
    assert table == "embedding" and 0 < rows <= VOCAB
    width = 8 * LENGTH if pooling == "flatten" else 8
    assert [w.shape for w in model.get_weights()] == [(width, 16), (16,), (16, 1), (1,)]


def test_embedding_trains_on_a_parameter_server_cluster():
    x, y = clicks(8000)
    xt, yt = clicks(2000, seed=1)
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.SimpleClusterResolver(
            {"ps": ["p0", "p1"], "worker": ["w0"]}))
    with strategy.scope():
        model = embedding_model("mean")
    h = model.fit(x, y, batch_size=64, epochs=3, validation_data=(xt, yt), verbose=0)
    assert len(h.history["val_accuracy"]) == 3
    assert h.history["val_accuracy"][-1] > 0.8, h.history
    # The tables were read back from the PS tasks.
    assert model._native.table_rows() and model._native.table_rows()[0][1] > 0


def test_embedding_arguments_and_inputs_are_checked():
    def build(*layers, optimizer="adam"):
        m = tf.keras.Sequential(list(layers))
        m.compile(optimizer, "binary_crossentropy")
        return m

    E, F, P, D = (tf.keras.layers.Embedding, tf.keras.layers.Flatten,
                  tf.keras.layers.GlobalAveragePooling1D, tf.keras.layers.Dense)
    with pytest.raises(ValueError, match="`input_dim`"):
        E(0, 8)
    with pytest.raises(ValueError, match="`output_dim`"):
        E(10, -1)
    with pytest.raises(ValueError, match="mask_zero"):
        E(10, 4, mask_zero=True)
    with pytest.raises(ValueError, match="embeddings_initializer"):
        E(10, 4, embeddings_initializer="zeros")
    with pytest.raises(ValueError, match="needs `input_length`"):
        build(E(10, 4), F(), D(1, "sigmoid"))
    with pytest.raises(ValueError, match="at most 26 ids"):
        build(E(10, 4, input_length=27), F(), D(1, "sigmoid"))
    with pytest.raises(ValueError, match="followed by Flatten or GlobalAveragePooling1D"):
        build(E(10, 4, input_length=3), D(1, "sigmoid"))
    with pytest.raises(ValueError, match="first layer"):
        build(D(4, input_shape=(3,)), E(10, 4), F(), D(1, "sigmoid"))
    with pytest.raises(ValueError, match="GlobalAveragePooling1D must come right after"):
        build(D(4, input_shape=(3,)), P(), D(1, "sigmoid"))
    with pytest.raises(ValueError, match="RMSprop is not supported"):
        build(E(10, 4, input_length=3), F(), D(1, "sigmoid"), optimizer="rmsprop")
    with pytest.raises(ValueError, match="momentum"):
        build(E(10, 4, input_length=3), F(), D(1, "sigmoid"),
              optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9))

    m = build(E(10, 4, input_length=3), F(), D(1, "sigmoid"))
    ok = np.array([[0, 1, 9], [2, 3, 4]])
    with pytest.raises(errors.InvalidArgumentError, match=r"indices\[1,2\] = 10 is not in \[0, 10\)"):
        m.fit(np.array([[0, 1, 9], [2, 3, 10]]), np.array([0, 1]), verbose=0)
    with pytest.raises(errors.InvalidArgumentError, match=r"indices\[0,0\] = -1"):
        m.predict(np.array([[-1, 1, 2]]), verbose=0)
    with pytest.raises(ValueError, match=r"shape \(examples, 3\)"):
        m.fit(np.array([[0, 1], [2, 3]]), np.array([0, 1]), verbose=0)
    with pytest.raises(ValueError, match="integer ids"):
        m.fit(np.array([[0.5, 1, 2], [2, 3, 4]]), np.array([0, 1]), verbose=0)
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        m.fit(ok, np.array([0, 2]), verbose=0)
    # Float ids that are whole numbers, and a dataset, are accepted.
    m.fit(ok.astype(np.float64), np.array([0, 1]), verbose=0)
    ds = tf.data.Dataset.from_tensor_slices((ok, np.array([0, 1]))).batch(2)
    h = m.fit(ds, epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2
    # Strategies that do not train tables say so.
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        mm = build(E(10, 4, input_length=3), F(), D(1, "sigmoid"))
    with pytest.raises(errors.InvalidArgumentError, match="does not train embedding tables"):
        mm.fit(ok, np.array([0, 1]), verbose=0)
