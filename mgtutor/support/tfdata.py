"""tf.data iterators that end at once: `without_autotuner` (one stream), `iterators_end_promptly` (all)."""

from __future__ import annotations

from typing import Any

_PATCHED = "_mgtutor_ends_promptly"


def without_autotuner(dataset: Any) -> Any:
    """`dataset` with tf.data's autotuner off, so dropping its iterator does not wait.

    Measured on TF 2.21: the autotuner's thread sleeps between rounds, each sleep twice the last up to a
    minute, and is not woken when its iterator is dropped: the drop (a fit's last epoch, a timing loop's
    last batch) waits for the thread's next round, up to 16 s after a 20 s fit. ``AUTOTUNE`` sizes still
    run, at fixed defaults. Lesson 16 writes the same option out.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def iterators_end_promptly() -> bool:
    """From now on, every tf.data iterator this process makes has no autotuner unless its dataset sets one.

    Keras makes and drops iterators a lesson never sees: `fit(x, y)`'s dataset, each epoch's validation
    pass, and under MirroredStrategy the source of its MultiDeviceIterator and one copy of the stream per
    device (made with default options, whatever the stream's). Each drop can wait as `without_autotuner`
    says. Every way TF makes an iterator first calls ``Dataset._apply_debug_options`` (the hook where
    ``tf.data.experimental.enable_debug_mode`` turns the autotuner off); this wraps it so a dataset whose
    ``autotune.enabled`` is unset gets `without_autotuner`, and one that sets it keeps its choice.
    `setup_devices` calls it; calling it again changes nothing. Returns whether the wrap is in place
    (False on a TensorFlow without that hook: iterators then keep TF's default).
    """
    from tensorflow.python.data.ops import dataset_ops

    base = dataset_ops.DatasetV2
    if getattr(base, _PATCHED, False):
        return True
    apply = getattr(base, "_apply_debug_options", None)
    if apply is None:
        return False

    def _apply_debug_options(self: Any) -> Any:
        dataset = apply(self)
        if dataset.options().autotune.enabled is None:
            dataset = without_autotuner(dataset)
        return dataset

    base._apply_debug_options = _apply_debug_options
    setattr(base, _PATCHED, True)
    return True
