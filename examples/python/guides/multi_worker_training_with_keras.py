"""TensorFlow's guide "Multi-worker training with Keras"
(tensorflow.org/tutorials/distribute/multi_worker_with_keras), written as
the guide writes it with `import strata as tf`; Fashion-MNIST in place of
the MNIST download. The guide starts one process per TF_CONFIG worker;
here MultiWorkerMirroredStrategy starts the workers TF_CONFIG lists as a
local cluster (a TF_CONFIG with a "chief" task joins a running one)."""
import json
import os

import numpy as np

import strata as tf


# mnist_setup.py of the guide.
def mnist_dataset(batch_size):
    (x_train, y_train), _ = tf.keras.datasets.fashion_mnist.load_data()
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
    return train_dataset


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation='relu'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dense(10)
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
                  metrics=['accuracy'])
    return model


tf_config = {
    'cluster': {
        'worker': ['localhost:12345', 'localhost:23456']
    },
    'task': {'type': 'worker', 'index': 0}
}
os.environ['TF_CONFIG'] = json.dumps(tf_config)

# main.py of the guide.
per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

epochs = int(os.environ.get("STRATA_GUIDE_EPOCHS", 3))
history = multi_worker_model.fit(multi_worker_dataset, epochs=epochs, steps_per_epoch=70)

print("GUIDE_RESULT accuracy=%.4f" % history.history["accuracy"][-1])
