"""Keras 2 APIs that Keras 3 removed, rebuilt faithfully so the seed tutorials' code runs unchanged.

- `towers`: ``keras.utils.multi_gpu_model``, towers sharing the template's weights.
- `fit_generator`: ``Model.fit_generator``; `streams`, the endless stream it reads.
- `augment`: ``ImageDataGenerator``, with `augment_flow` (its ``PyDataset``), `augment_tf` (the
  ``tf.data`` path), `augment_layers` (the in-model path), `augment_checks`, `augment_resample`
  and `augment_stats`.

The notebooks teach the Keras 3 way beside each. Importing this package loads nothing.
"""
