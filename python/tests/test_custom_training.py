"""Custom training loops: tf.GradientTape over a model's call and a Keras
loss, optimizer.apply_gradients, strategy.run / reduce under OneDevice and
Mirrored; the step runs in C++ and equals the same steps of train_on_batch
on the global batches; what the tape does not record fails naming it."""
import numpy as np
import pytest

import strata as tf

from _helpers import toy

keras = tf.keras
layers = tf.keras.layers


def make_model():
    return keras.Sequential([layers.Dense(16, activation="relu", input_shape=(2,)),
                             layers.BatchNormalization(),
                             layers.Dense(2)])


LOSS = dict(from_logits=True, reduction=keras.losses.Reduction.NONE)


@pytest.mark.parametrize("replicas", [1, 2])
def test_tape_steps_equal_train_on_batch_on_the_global_batches(replicas):
    strategy = (tf.distribute.OneDeviceStrategy("/cpu:0") if replicas == 1 else
                tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    x, y = toy(256)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.Adam(0.01)
        loss_object = keras.losses.SparseCategoricalCrossentropy(**LOSS)
        twin = make_model()  # the same strategy: BatchNormalization per replica
    model(x[:2])  # builds the weights
    twin.compile(keras.optimizers.Adam(0.01),
                 keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    twin.set_weights(model.get_weights())

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, predictions),
                                              global_batch_size=64)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def distributed_train_step(batch):
        losses = strategy.run(train_step, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    total = 0.0
    for batch in strategy.experimental_distribute_dataset(ds):
        total += float(distributed_train_step(batch))
    for bx, by in ds:
        twin.train_on_batch(bx, by)
    for a, b in zip(model.get_weights(), twin.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert 0 < total / 4 < 1.0
    assert optimizer.iterations == 4


def test_what_the_tape_does_not_record_is_named():
    model = make_model()
    loss_object = keras.losses.SparseCategoricalCrossentropy(**LOSS)
    optimizer = keras.optimizers.SGD(0.1)
    x, y = toy(32)
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        per_example = loss_object(y, out)
        loss = tf.nn.compute_average_loss(per_example)
    with pytest.raises(TypeError, match="per-example losses"):
        tape.gradient(per_example, model.trainable_variables)
    with pytest.raises(TypeError, match="gradient of a float32"):
        tape.gradient(np.float32(1.0), model.trainable_variables)
    grads = tape.gradient(loss, model.trainable_variables)
    with pytest.raises(TypeError, match="arithmetic on a gradient"):
        grads[0] * 0.5
    with pytest.raises(TypeError, match="some of the model's variables"):
        optimizer.apply_gradients(zip(grads[:1], model.trainable_variables[:1]))
    with pytest.raises(TypeError, match="multiplying a recorded loss"):
        loss * 2
    before = model.get_weights()
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert not np.array_equal(before[0], model.get_weights()[0])
    # Averaged over another batch size than the step has: named.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        m2 = make_model()
    m2(x[:2])
    opt2 = keras.optimizers.SGD(0.1)

    def step(batch):
        bx, by = batch
        with tf.GradientTape() as t:
            l2 = tf.nn.compute_average_loss(loss_object(by, m2(bx, training=True)),
                                            global_batch_size=10)
        opt2.apply_gradients(zip(t.gradient(l2, m2.trainable_variables),
                                 m2.trainable_variables))
    batch = next(iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(32))))
    with pytest.raises(ValueError, match="global_batch_size=10"):
        strategy.run(step, args=(batch,))


def test_checkpoint_saves_and_restores_weights_and_optimizer(tmp_path):
    model = make_model()
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(*toy(), epochs=1, verbose=0)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert path.endswith("ckpt-1") and tf.train.latest_checkpoint(str(tmp_path)) == path
    other = make_model()
    tf.train.Checkpoint(model=other).restore(path)
    x, _ = toy(10)
    np.testing.assert_allclose(other(x), model(x), rtol=1e-6)
