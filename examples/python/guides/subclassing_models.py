"""Keras's guide "Making new layers and models via subclassing"
(keras.io/guides/making_new_layers_and_models_via_subclassing), its models
composed of built-in layers, written as the guide writes them with
`import strata as tf`: a `keras.Model` subclass whose `call` composes
layers (traced once into the runtime's layer graph), trained with fit;
Fashion-MNIST in place of MNIST. Custom layers with their own weights
(add_weight, add_loss) are not supported (README "Python")."""
import os

import strata as tf

keras = tf.keras
layers = tf.keras.layers

EPOCHS = int(os.environ.get("STRATA_GUIDE_EPOCHS", 3))


class MLPBlock(keras.Model):
    """The guide's MLPBlock, over built-in Dense layers."""

    def __init__(self):
        super().__init__()
        self.linear_1 = layers.Dense(32, activation="relu")
        self.linear_2 = layers.Dense(32, activation="relu")
        self.linear_3 = layers.Dense(10)

    def call(self, inputs):
        x = self.linear_1(inputs)
        x = self.linear_2(x)
        return self.linear_3(x)


class ResidualClassifier(keras.Model):
    """A model composed of built-in layers, with a residual connection."""

    def __init__(self, num_classes=10):
        super().__init__(name="residual_classifier")
        self.flatten = layers.Flatten()
        self.dense_in = layers.Dense(128, activation="relu")
        self.norm = layers.LayerNormalization()
        self.dense_mid = layers.Dense(128, activation="relu")
        self.dropout = layers.Dropout(0.2)
        self.classifier = layers.Dense(num_classes)

    def call(self, inputs, training=None):
        x = self.dense_in(self.flatten(inputs))
        x = x + self.dense_mid(self.norm(x))
        x = self.dropout(x, training=training)
        return self.classifier(x)


(x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()
x_train = x_train.reshape(60000, 784).astype("float32") / 255
x_test = x_test.reshape(10000, 784).astype("float32") / 255

mlp = MLPBlock()
y = mlp(tf.ones(shape=(3, 784)))  # the first call builds the model's weights
print("weights:", len(mlp.weights))
print("trainable weights:", len(mlp.trainable_weights))

mlp.compile(optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"])
mlp.fit(x_train, y_train, batch_size=64, epochs=EPOCHS)

model = ResidualClassifier()
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
model.fit(x_train.reshape(-1, 28, 28), y_train, batch_size=64, epochs=EPOCHS)
model.summary()
loss, acc = model.evaluate(x_test.reshape(-1, 28, 28), y_test, verbose=2)
print("GUIDE_RESULT accuracy=%.4f" % acc)
