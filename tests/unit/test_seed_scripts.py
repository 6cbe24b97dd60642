"""The seed tutorials' own code runs on Keras 3 with only its imports changed.

The script below is seed 000's code as written (Keras 1 layer syntax translated
to Keras 3, as the issue allows), with `mgtutor` imports in place of the removed
Keras 2 APIs. They run in a child process because they set up their devices.
"""

from __future__ import annotations

from tests.conftest import run_python

SEED_000 = """
import json
import numpy as np
import keras
from keras.models import Sequential
from keras.layers import Dense, Dropout, Activation, Flatten, Conv2D, MaxPooling2D
# --- changed imports: the Keras 2 APIs Keras 3 removed ---
from mgtutor import setup_devices, multi_gpu_model, seed_optimizer
from mgtutor.data import load_cifar10 as load_data   # keras.datasets.cifar10.load_data, offline
setup_devices(4)                                 # 4 simulated GPUs on a CPU-only machine
# --- seed 000 from here on ---
num_classes = 10
(X_train, y_train), (X_test, y_test) = load_data()
Y_train = keras.utils.to_categorical(y_train, num_classes)
Y_test = keras.utils.to_categorical(y_test, num_classes)

model = Sequential()
model.add(keras.Input(shape=X_train.shape[1:]))
model.add(Conv2D(32, (3, 3), padding='same'))
model.add(Activation('relu'))
model.add(Conv2D(32, (3, 3)))
model.add(Activation('relu'))
model.add(MaxPooling2D(pool_size=(2, 2)))
model.add(Dropout(0.25))
model.add(Conv2D(64, (3, 3), padding='same'))
model.add(Activation('relu'))
model.add(Conv2D(64, (3, 3)))
model.add(Activation('relu'))
model.add(MaxPooling2D(pool_size=(2, 2)))
model.add(Dropout(0.25))
model.add(Flatten())
model.add(Dense(512))
model.add(Activation('relu'))
model.add(Dropout(0.5))
model.add(Dense(num_classes))
model.add(Activation('softmax'))
template = model
before = [w.copy() for w in template.get_weights()]

model = multi_gpu_model(model, gpus=4)
opt = seed_optimizer(learning_rate=0.0001, decay=1e-6)  # keras.optimizers.rmsprop(lr=0.0001, decay=1e-6)
model.compile(loss='categorical_crossentropy', optimizer=opt, metrics=['accuracy'])

batch_size = 32*4
epochs = 1
X_train = X_train.astype('float32')
X_test = X_test.astype('float32')
X_train /= 255
X_test /= 255
history = model.fit(X_train, Y_train, batch_size=batch_size, epochs=epochs,
                    validation_data=(X_test, Y_test), verbose=0)

def batches(x, y, size):
    while True:
        for start in range(0, len(x), size):
            yield x[start:start + size], y[start:start + size]

more = model.fit_generator(batches(X_train, Y_train, batch_size), steps_per_epoch=5, epochs=1,
                           validation_data=(X_test, Y_test), verbose=0)
moved = max(float(np.abs(a - b).max()) for a, b in zip(template.get_weights(), before))
print(json.dumps({
    "n_train": len(X_train), "history": history.history, "more": more.history,
    "template_moved": moved, "towers": list(model.tower_devices),
}))
"""

def test_seed_000_runs_with_only_imports_changed(data_dir):
    result = run_python(SEED_000, timeout=600)
    assert result["n_train"] == 5085  # the shared CIFAR-10 subset; last batch 93 over 4 towers
    assert result["towers"] == [f"/device:CPU:{i}" for i in range(4)]
    history = result["history"]
    assert len(history["loss"]) == 1 and 0 < history["loss"][0] < 10
    assert 0.0 <= history["val_accuracy"][0] <= 1.0
    assert 0 < result["more"]["loss"][0] < 10
    assert result["template_moved"] > 0  # training the wrapper trained the template

