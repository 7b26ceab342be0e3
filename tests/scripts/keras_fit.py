"""A Keras 3 script as people write it (torch backend): Model.fit with a validation split."""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(0)
x = rng.normal(size=(320, 16)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")

model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x, y, epochs=epochs, batch_size=32, validation_split=0.2, verbose=0)
print("final val accuracy", history.history["val_accuracy"][-1])
