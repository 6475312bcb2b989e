"""The tensor functions input pipelines use (tf.cast, tf.reshape, tf.one_hot,
tf.math, tf.random over numpy), tf.data's Dataset methods, and fit's
steps_per_epoch over a repeated dataset."""
import numpy as np
import pytest

import strata as tf


def test_tensor_functions_follow_tensorflow():
    x = tf.constant([[1, 2], [3, 4]], dtype=tf.uint8)
    assert x.dtype == np.uint8
    f = tf.cast(x, tf.float32) / 255.0
    assert f.dtype == np.float32 and f[1, 1] == pytest.approx(4 / 255)
    assert tf.float32 == np.float32 and tf.float32.name == "float32"
    assert tf.constant(1.5).dtype == np.float32
    assert tf.reshape(x, [-1]).shape == (4,)
    assert tf.expand_dims(x, -1).shape == (2, 2, 1)
    assert tf.squeeze(np.zeros((3, 1, 2)), axis=1).shape == (3, 2)
    oh = tf.one_hot([0, 2], 3)
    np.testing.assert_array_equal(oh, [[1, 0, 0], [0, 0, 1]])
    assert oh.dtype == np.float32
    with pytest.raises(ValueError, match="`depth`"):
        tf.one_hot([1], 0)
    assert tf.math.reduce_mean(tf.constant([1.0, 3.0])) == 2.0
    assert tf.reduce_sum(x, axis=0).tolist() == [4, 6]
    assert tf.math.argmax([[0, 5, 1]], axis=1).tolist() == [1]
    np.testing.assert_allclose(tf.math.softmax([0.0, 0.0]), [0.5, 0.5])
    assert tf.convert_to_tensor([1, 2], dtype=tf.int64).dtype == np.int64
    assert tf.shape(np.zeros((4, 5))).tolist() == [4, 5]
    tf.random.set_seed(3)
    a = tf.random.uniform((4,))
    tf.random.set_seed(3)
    np.testing.assert_array_equal(a, tf.random.uniform((4,)))
    np.testing.assert_array_equal(tf.random.normal((3,), seed=5),
                                  tf.random.normal((3,), seed=5))
    assert tf.random.uniform((2,), maxval=10, dtype=tf.int32).dtype == np.int32
    with pytest.raises(TypeError, match="Cannot convert"):
        tf.cast(x, "not_a_dtype")

    @tf.function
    def double(v):
        return v * 2
    assert double(3) == 6


def test_dataset_map_runs_per_element_as_tf_data_does():
    images = np.arange(2 * 4, dtype=np.uint8).reshape(2, 4)
    ds = tf.data.Dataset.from_tensor_slices((images, np.array([0, 1])))

    def scale(image, label):
        image = tf.cast(image, tf.float32)
        return image / tf.reduce_max(image), label  # per element: its own max
    x, _ = next(iter(ds.map(scale).batch(2)))
    np.testing.assert_allclose(x[0], images[0] / 3.0)
    np.testing.assert_allclose(x[1], images[1] / 7.0)
    # A function of the element's shape (reshape) works per element too.
    r = ds.map(lambda im, y: (tf.reshape(im, [2, 2, 1]), tf.one_hot(y, 2)))
    assert r.features.shape == (2, 2, 2, 1) and r.labels.shape == (2, 2)
    # After batch, map sees batches.
    b = ds.batch(2).map(lambda im, y: (tf.cast(im, tf.float32) * 2, y))
    assert b.features.dtype == np.float32 and b.features[1, 3] == 14


def test_dataset_methods():
    ds = tf.data.Dataset.from_tensor_slices((np.arange(10), np.arange(10) % 2))
    assert [int(x) for x, _ in ds.skip(7)] == [7, 8, 9]
    assert [int(x) for x, _ in ds.shard(3, 1)] == [1, 4, 7]
    with pytest.raises(ValueError, match="`index`"):
        ds.shard(2, 2)
    assert [int(x) for x, _ in ds.filter(lambda x, y: y == 0)] == [0, 2, 4, 6, 8]
    assert [int(x) for x, _ in ds.take(2).as_numpy_iterator()] == [0, 1]
    z = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(np.ones((3, 2))),
                             tf.data.Dataset.from_tensor_slices(np.arange(3))))
    assert z.labels.tolist() == [0, 1, 2]
    assert len(list(ds.batch(4).unbatch())) == 10
    assert [b[0].shape[0] for b in ds.padded_batch(4)] == [4, 4, 2]
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = \
        tf.data.experimental.AutoShardPolicy.DATA
    assert ds.with_options(opts).options().experimental_distribute.auto_shard_policy \
        == tf.data.experimental.AutoShardPolicy.DATA
    assert tf.data.AUTOTUNE == -1
    assert ds.prefetch(tf.data.AUTOTUNE).cache().cardinality() == 10
    assert [int(v) for v in tf.data.Dataset.range(3)] == [0, 1, 2]
    named = tf.data.Dataset.from_tensor_slices(({"a": np.zeros((4, 1)),
                                                 "b": np.ones((4, 2))}, np.arange(4)))
    first, label = next(iter(named))
    assert set(first) == {"a", "b"} and first["b"].shape == (2,) and label == 0


def test_fit_reads_steps_per_epoch_from_a_repeated_dataset():
    rng = np.random.default_rng(0)
    x = rng.random((1000, 2)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu",
                                                       input_shape=(2,)),
                                 tf.keras.layers.Dense(2, activation="softmax")])
    model.compile(tf.keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).repeat().batch(50)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model.fit(ds, epochs=1, verbose=0)
    seen = []
    cb = tf.keras.callbacks.LambdaCallback(
        on_epoch_end=lambda e, logs: seen.append(model.history))
    h = model.fit(ds, epochs=3, steps_per_epoch=30, verbose=0, callbacks=[cb])
    assert len(h.history["loss"]) == 3 and len(seen) == 3
    assert h.history["accuracy"][-1] > 0.9
    with pytest.raises(ValueError, match="`steps_per_epoch`"):
        model.fit(ds, epochs=1, steps_per_epoch=0, verbose=0)


def test_multi_input_model_trains_on_a_dataset_of_named_features():
    rng = np.random.default_rng(1)
    x = rng.random((1000, 2)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int32)
    a = tf.keras.Input(shape=(1,), name="a")
    b = tf.keras.Input(shape=(1,), name="b")
    h = tf.keras.layers.Dense(16, activation="relu")(tf.keras.layers.concatenate([a, b]))
    model = tf.keras.Model({"a": a, "b": b}, tf.keras.layers.Dense(2, activation="softmax")(h))
    model.compile(tf.keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    ds = tf.data.Dataset.from_tensor_slices(({"a": x[:, :1], "b": x[:, 1:]}, y)).batch(32)
    h = model.fit(ds, epochs=4, verbose=0)
    assert h.history["accuracy"][-1] > 0.9


def test_take_and_skip_count_batches_after_shuffle_and_repeat():
    x = np.arange(1000)
    ds = tf.data.Dataset.from_tensor_slices((x, x % 2))
    assert len(ds.batch(32).take(10).features) == 320
    assert ds.batch(32).take(10).cardinality() == 10
    assert len(ds.batch(32).skip(2).features) == 1000 - 64
    shuffled = ds.shuffle(1000, seed=0)
    head, rest = shuffled.take(500), shuffled.skip(500)
    assert not np.array_equal(head.features, np.arange(500))  # shuffled first
    assert sorted(np.concatenate([head.features, rest.features])) == list(range(1000))
    assert len(ds.repeat(3).take(2500).features) == 2500
    # map means each element: a per-element reduction is not the whole array's.
    y = np.ones((10, 2))
    y[1] = [0.5, 1.0]
    m = tf.data.Dataset.from_tensor_slices(y).map(lambda e: e / tf.reduce_max(e))
    np.testing.assert_allclose(m.features[1], [0.5, 1.0])


def test_bad_arguments_are_named():
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2)), np.zeros(4)))
    with pytest.raises(ValueError, match="`batch_size`"):
        ds.batch("x")
    with pytest.raises(ValueError, match="as a dict"):
        tf.data.Dataset.from_tensor_slices(((np.zeros((4, 1)), np.zeros((4, 1)),
                                             np.zeros((4, 1))), np.zeros(4)))
    with pytest.raises(ValueError, match="`threshold`"):
        tf.keras.metrics.BinaryAccuracy(threshold="high")
    with pytest.raises(ValueError, match="`thresholds`"):
        tf.keras.metrics.Precision(thresholds=[0.3, 0.7])
