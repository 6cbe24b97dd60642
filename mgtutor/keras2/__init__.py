"""Keras 2 APIs that Keras 3 removed, rebuilt faithfully so the seed tutorials' code runs unchanged.

`towers` is ``keras.utils.multi_gpu_model``; `augment` (with its ``augment_*`` helpers) is
``ImageDataGenerator``; `fit_generator` (with `streams`) is ``Model.fit_generator``. The
notebooks teach the Keras 3 way beside each. Importing this package loads nothing.
"""
