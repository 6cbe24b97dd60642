"""Seed 000's tutorial as a user brings it: its code with only the Keras 2 imports changed.

    python tests/unit/seed_000_child.py

Keras 1 layer syntax is written in Keras 3 (``Conv2D(32, (3, 3), padding='same')``);
``multi_gpu_model``, ``ImageDataGenerator``, ``fit_generator`` and the optimizer come
from `mgtutor`. The seed trains 50 epochs on all of CIFAR-10; here one epoch of
``model.fit`` on the shared 5,085-image subset (its last batch, 93 images, split over
4 towers), a Python generator through ``fit_generator``, then the seed's augmented
training cell, unchanged, on the first 640 images. It reports with `report_result`.
"""

import keras
import numpy as np
from keras.layers import Activation, Conv2D, Dense, Dropout, Flatten, MaxPooling2D
from keras.models import Sequential

# --- changed imports: the Keras 2 APIs Keras 3 removed ---
from mgtutor import multi_gpu_model, seed_optimizer, setup_devices
from mgtutor.data import load_cifar10 as load_data  # keras.datasets.cifar10.load_data, offline
from mgtutor.keras2.augment import ImageDataGenerator  # keras.preprocessing.image
from mgtutor.support.processes import report_result

setup_devices(4)  # 4 simulated GPUs on a CPU-only machine

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
n_train = len(X_train)
history = model.fit(X_train, Y_train, batch_size=batch_size, epochs=epochs,
                    validation_data=(X_test, Y_test), verbose=0)


def batches(x, y, size):
    while True:
        for start in range(0, len(x), size):
            yield x[start:start + size], y[start:start + size]


more = model.fit_generator(batches(X_train, Y_train, batch_size), steps_per_epoch=5, epochs=1,
                           validation_data=(X_test, Y_test), verbose=0)

X_train, Y_train = X_train[:640], Y_train[:640]  # 5 steps of the seed's batch
# --- seed 000's training cell, unchanged ---
datagen = ImageDataGenerator(
        featurewise_center=False,  # set input mean to 0 over the dataset
        samplewise_center=False,  # set each sample mean to 0
        featurewise_std_normalization=False,  # divide inputs by std of the dataset
        samplewise_std_normalization=False,  # divide each input by its std
        zca_whitening=False,  # apply ZCA whitening
        rotation_range=0,  # randomly rotate images in the range (degrees, 0 to 180)
        width_shift_range=0.1,  # randomly shift images horizontally (fraction of total width)
        height_shift_range=0.1,  # randomly shift images vertically (fraction of total height)
        horizontal_flip=True,  # randomly flip images
        vertical_flip=False)  # randomly flip images
datagen.fit(X_train)
augmented = model.fit_generator(datagen.flow(X_train, Y_train, batch_size=batch_size),
                                steps_per_epoch=X_train.shape[0] // batch_size,
                                epochs=epochs,
                                validation_data=(X_test, Y_test))
# --- end of seed 000 ---
moved = max(float(np.abs(a - b).max()) for a, b in zip(template.get_weights(), before, strict=True))
report_result({"n_train": n_train, "history": history.history, "more": more.history,
               "augmented": augmented.history, "template_moved": moved, "towers": list(model.tower_devices)})
