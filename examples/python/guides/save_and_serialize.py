"""Keras's guide "Save, serialize, and export models"
(keras.io/guides/serialization_and_saving), its saving and config parts,
written as the guide writes them with `import strata as tf`. One change:
the runtime's targets are class labels, so the guide's random regression
target is a random binary label here (and the loss binary cross-entropy).
Custom objects and export() are not supported (README "Python")."""
import os

import numpy as np

import strata as tf

keras = tf.keras


def get_model():
    # Create a simple model.
    inputs = keras.Input(shape=(32,))
    outputs = keras.layers.Dense(1, activation="sigmoid")(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(), loss="binary_crossentropy")
    return model


model = get_model()

# Train the model.
test_input = np.random.random((128, 32))
test_target = (test_input.sum(axis=1) > 16).astype("int64")
model.fit(test_input, test_target)

# Calling `save('my_model.keras')` creates a zip archive `my_model.keras`.
model.save("my_model.keras")

# It can be used to reconstruct the model identically.
reconstructed_model = keras.models.load_model("my_model.keras")

# Let's check:
np.testing.assert_allclose(
    model.predict(test_input), reconstructed_model.predict(test_input)
)

# Layer example
layer = keras.layers.Dense(3, activation="relu")
layer_config = layer.get_config()
print(layer_config)
new_layer = keras.layers.Dense.from_config(layer_config)

# Sequential model example
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
config = model.get_config()
new_model = keras.Sequential.from_config(config)

# Functional model example
inputs = keras.Input((32,))
outputs = keras.layers.Dense(1)(inputs)
model = keras.Model(inputs, outputs)
config = model.get_config()
new_model = keras.Model.from_config(config)

# to_json() and keras.models.model_from_json()
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
json_config = model.to_json()
new_model = keras.models.model_from_json(json_config)

# Saving and loading only the weights values
inputs = keras.Input(shape=(784,), name="digits")
x = keras.layers.Dense(64, activation="relu", name="dense_1")(inputs)
x = keras.layers.Dense(64, activation="relu", name="dense_2")(x)
outputs = keras.layers.Dense(10, name="predictions")(x)
functional_model = keras.Model(inputs=inputs, outputs=outputs, name="3_layer_mlp")
functional_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                         metrics=["accuracy"])

(x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()
x_train = x_train.reshape(60000, 784).astype("float32") / 255
x_test = x_test.reshape(10000, 784).astype("float32") / 255
functional_model.fit(x_train, y_train, batch_size=64,
                     epochs=int(os.environ.get("STRATA_GUIDE_EPOCHS", 2)))

# Weights saved and loaded into a model built again from its config.
functional_model.save_weights("my_model.weights.h5")
new_functional_model = keras.Model.from_config(functional_model.get_config())
new_functional_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                             metrics=["accuracy"])
new_functional_model.load_weights("my_model.weights.h5")
for a, b in zip(functional_model.get_weights(), new_functional_model.get_weights()):
    np.testing.assert_array_equal(a, b)
_, acc = new_functional_model.evaluate(x_test, y_test, verbose=2)
print("GUIDE_RESULT accuracy=%.4f" % acc)
