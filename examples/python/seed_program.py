# The tf.distribute program of our documentation, unchanged but for its
# import (and the strategy line, which STRATA_STRATEGY picks: mirrored,
# multi_worker_mirrored, central_storage, parameter_server, one_device).
import os

import strata as tf
(x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
x_train = x_train.reshape(-1, 784).astype("float32") / 255.0
x_test = x_test.reshape(-1, 784).astype("float32") / 255.0
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).batch(128)
strategy = {
    "mirrored": lambda: tf.distribute.MirroredStrategy(),
    "multi_worker_mirrored": lambda: tf.distribute.MultiWorkerMirroredStrategy(),
    "central_storage": lambda: tf.distribute.CentralStorageStrategy(),
    "parameter_server": lambda: tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver()),
    "one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
}[os.environ.get("STRATA_STRATEGY", "mirrored")]()
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(128, activation='relu', input_shape=(784,)),
        tf.keras.layers.Dense(10, activation='softmax')])
    optimizer = tf.keras.optimizers.Adam()
model.compile(optimizer=optimizer, loss='sparse_categorical_crossentropy', metrics=['accuracy'])
history = model.fit(train_dataset, epochs=int(os.environ.get("STRATA_EPOCHS", "10")))
print(model.evaluate(x_test, y_test))
