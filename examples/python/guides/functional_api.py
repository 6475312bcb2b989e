"""Keras's guide "The Functional API" (keras.io/guides/functional_api),
the parts over built-in layers, written as the guide writes them with
`import strata as tf` (`keras` = tf.keras); Fashion-MNIST in place of the
MNIST and CIFAR-10 downloads. Left out: the autoencoder (Conv2DTranspose,
UpSampling2D) and nested models, multiple outputs, variable-length inputs
(see README "Python")."""
import os

import strata as tf

keras = tf.keras
layers = tf.keras.layers

EPOCHS = int(os.environ.get("STRATA_GUIDE_EPOCHS", 2))

inputs = keras.Input(shape=(784,))
img_inputs = keras.Input(shape=(28, 28, 1))
print(inputs.shape, inputs.dtype)

dense = layers.Dense(64, activation="relu")
x = dense(inputs)
x = layers.Dense(64, activation="relu")(x)
outputs = layers.Dense(10)(x)

model = keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")
model.summary()

# Training, evaluation, and inference
(x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()

x_train = x_train.reshape(60000, 784).astype("float32") / 255
x_test = x_test.reshape(10000, 784).astype("float32") / 255

model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=["accuracy"],
)

history = model.fit(x_train, y_train, batch_size=64, epochs=EPOCHS, validation_split=0.2)

test_scores = model.evaluate(x_test, y_test, verbose=2)
print("Test loss:", test_scores[0])
print("Test accuracy:", test_scores[1])
mlp_accuracy = test_scores[1]

# Save and serialize
model.save("my_model.keras")
del model
# Recreate the exact same model purely from the file:
model = keras.models.load_model("my_model.keras")
assert abs(model.evaluate(x_test, y_test, verbose=0)[1] - mlp_accuracy) < 1e-6

# A toy ResNet model (28x28x1 Fashion-MNIST images in place of CIFAR-10's).
inputs = keras.Input(shape=(28, 28, 1), name="img")
x = layers.Conv2D(32, 3, activation="relu")(inputs)
x = layers.Conv2D(64, 3, activation="relu")(x)
block_1_output = layers.MaxPooling2D(3)(x)

x = layers.Conv2D(64, 3, activation="relu", padding="same")(block_1_output)
x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
block_2_output = layers.add([x, block_1_output])

x = layers.Conv2D(64, 3, activation="relu", padding="same")(block_2_output)
x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
block_3_output = layers.add([x, block_2_output])

x = layers.Conv2D(64, 3, activation="relu")(block_3_output)
x = layers.GlobalAveragePooling2D()(x)
x = layers.Dense(256, activation="relu")(x)
x = layers.Dropout(0.5)(x)
outputs = layers.Dense(10)(x)

model = keras.Model(inputs, outputs, name="toy_resnet")
model.summary()

(x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()

x_train = x_train.astype("float32").reshape(-1, 28, 28, 1) / 255.0
x_test = x_test.astype("float32").reshape(-1, 28, 28, 1) / 255.0
y_train = keras.utils.to_categorical(y_train, 10)
y_test = keras.utils.to_categorical(y_test, 10)

model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss=keras.losses.CategoricalCrossentropy(from_logits=True),
    metrics=["acc"],
)
# We restrict the data to the first 1000 samples so as to limit execution time
# for this guide. Try to train on the entire dataset until convergence!
model.fit(x_train[:1000], y_train[:1000], batch_size=64, epochs=1, validation_split=0.2)

# Shared layers
# Embedding for 1000 unique words mapped to 128-dimensional vectors
shared_embedding = layers.Embedding(1000, 128)

# Sequences of integers (10 of them: the runtime's inputs have fixed shapes)
text_input_a = keras.Input(shape=(10,), dtype="int32")

# Sequences of integers
text_input_b = keras.Input(shape=(10,), dtype="int32")

# Reuse the same layer to encode both inputs
encoded_input_a = shared_embedding(text_input_a)
encoded_input_b = shared_embedding(text_input_b)
shared = keras.Model([text_input_a, text_input_b],
                     layers.Dense(1, activation="sigmoid")(
                         layers.GlobalAveragePooling1D()(
                             layers.add([encoded_input_a, encoded_input_b]))))
print("shared embedding parameters:", shared.count_params())
assert shared.count_params() == 1000 * 128 + 128 + 1

print("GUIDE_RESULT accuracy=%.4f" % mlp_accuracy)
