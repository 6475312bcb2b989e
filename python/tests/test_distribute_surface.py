"""tf.distribute's experimental surface over the cluster strategies:
variable partitioners feeding the PS placement, DatasetCreator with an
InputContext, CommunicationOptions for MultiWorkerMirrored; and functional
models trained under a cluster strategy, saved and loaded as any other."""
import numpy as np
import pytest

import strata as tf

from _helpers import needs_fashion

keras = tf.keras
layers = tf.keras.layers


def fashion(n=3000):
    (x, y), (xt, yt) = keras.datasets.fashion_mnist.load_data()
    return ((x[:n].astype("float32") / 255.0, y[:n]),
            (xt[:1000].astype("float32") / 255.0, yt[:1000]))


def functional_cnn():
    inputs = keras.Input(shape=(28, 28))
    x = layers.Reshape((28, 28, 1))(inputs)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs)


def test_partitioners_and_communication_options_check_their_arguments():
    p = tf.distribute.experimental.partitioners
    assert p.FixedShardsPartitioner(3)._spec() == {"type": "fixed", "num_shards": 3}
    assert p.MinSizePartitioner(min_shard_bytes=1024, max_shards=2)._spec() == {
        "type": "min_size", "min_shard_bytes": 1024, "max_shards": 2}
    assert p.MaxSizePartitioner(4096)._spec()["type"] == "max_size"
    with pytest.raises(ValueError, match="`num_shards`"):
        p.FixedShardsPartitioner(0)
    with pytest.raises(ValueError, match="`max_shard_bytes`"):
        p.MaxSizePartitioner(0)
    with pytest.raises(TypeError, match="variable_partitioner"):
        tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.SimpleClusterResolver(
                {"ps": ["p0"], "worker": ["w0"]}), variable_partitioner="fixed")
    # The partitioner is the job's strategy.partitioner: the job parser
    # checks it (before any process starts).
    bad = p.MaxSizePartitioner(4096)
    bad.max_shard_bytes = -5
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.SimpleClusterResolver(
            {"ps": ["p0"], "worker": ["w0"]}), variable_partitioner=bad)
    with strategy.scope():
        model = keras.Sequential([layers.Dense(2, input_shape=(2,), activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="job.strategy.partitioner.max_shard_bytes"):
        model.fit(np.zeros((10, 2), np.float32), np.zeros(10, np.int32), verbose=0)
    opts = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=1 << 20, timeout_seconds=30,
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    assert opts._spec() == {"pack_bytes": 1 << 20, "timeout_seconds": 30.0}
    with pytest.raises(ValueError, match="`bytes_per_pack`"):
        tf.distribute.experimental.CommunicationOptions(bytes_per_pack=-1)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model = keras.Sequential([layers.Dense(2, input_shape=(2,))])
        model.compile("sgd", "mse")
        model.fit(keras.utils.experimental.DatasetCreator(lambda ctx: None), epochs=1)


@needs_fashion
def test_parameter_server_with_a_partitioner_and_a_dataset_creator(tmp_path):
    (x, y), (xt, yt) = fashion()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        {"ps": ["p0", "p1"], "worker": ["w0", "w1"]})
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver,
        variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=4 << 10, max_shards=2))
    seen = []

    def dataset_fn(input_context):
        seen.append((input_context.num_input_pipelines,
                     input_context.num_replicas_in_sync))
        batch = input_context.get_per_replica_batch_size(64)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(3000).repeat()
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.batch(batch).prefetch(2)

    with strategy.scope():
        model = functional_cnn()
    model.compile(keras.optimizers.Adam(0.003),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    h = model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=2,
                  steps_per_epoch=40, verbose=0)
    assert seen == [(1, 2)] and len(h.history["loss"]) == 2
    _, acc = model.evaluate(xt, yt, verbose=0)
    assert acc > 0.6
    # Trained on the cluster, saved and loaded as any model.
    path = str(tmp_path / "ps.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(xt[:20]), model.predict(xt[:20]),
                               rtol=1e-5, atol=1e-6)


@needs_fashion
def test_multi_worker_mirrored_takes_communication_options():
    (x, y), (xt, yt) = fashion()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=64 << 10, timeout_seconds=60,
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    with strategy.scope():
        model = functional_cnn()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", "sparse_top_k_categorical_accuracy"])
    h = model.fit(x, y, batch_size=64, epochs=2, verbose=0, validation_data=(xt, yt))
    assert model.evaluate(xt, yt, verbose=0)[1] > 0.6
    # A metric computed here over the trained weights: in the last epoch's
    # logs (the run is one cluster fit), as evaluate gives it.
    assert len(h.history["val_sparse_top_k_categorical_accuracy"]) == 1
    assert h.history["val_sparse_top_k_categorical_accuracy"][-1] == pytest.approx(
        model.evaluate(xt, yt, verbose=0, return_dict=True)[
            "sparse_top_k_categorical_accuracy"])


@needs_fashion
@pytest.mark.parametrize("make", [
    lambda: tf.distribute.experimental.CentralStorageStrategy(),
    lambda: tf.distribute.MultiWorkerMirroredStrategy(),
], ids=["central_storage", "multi_worker_mirrored"])
def test_a_cluster_trained_model_saves_and_loads(tmp_path, make):
    (x, y), (xt, yt) = fashion(2000)
    strategy = make()
    with strategy.scope():
        model = functional_cnn()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    path = str(tmp_path / "cluster.keras")
    model.save(path)
    with strategy.scope():
        loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(xt[:20]), model.predict(xt[:20]),
                               rtol=1e-5, atol=1e-6)
    assert loaded.evaluate(xt, yt, verbose=0)[1] == pytest.approx(
        model.evaluate(xt, yt, verbose=0)[1], abs=1e-6)
