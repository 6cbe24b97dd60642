"""The child program of test_tfdata.py: iterators after `setup_devices`, in a fresh process.

    python tests/unit/support/tfdata_child.py

It reports what it saw with `report_result`; the parent asserts.
"""

from mgtutor import setup_devices
from mgtutor.support.processes import report_result
from mgtutor.support.tfdata import iterators_end_promptly

devices = setup_devices(2, verbose=False)
import tensorflow as tf  # noqa: E402  (after the devices are set up, as in a lesson)
from tensorflow.python.data.ops import dataset_ops, multi_device_iterator_ops  # noqa: E402

wrapped = dataset_ops.DatasetV2._apply_debug_options
stream = tf.data.Dataset.range(16).map(lambda i: i * 2, num_parallel_calls=tf.data.AUTOTUNE).batch(4)
stream = stream.prefetch(tf.data.AUTOTUNE)
chosen = tf.data.Options()
chosen.autotune.enabled = True
plain, kept = iter(stream), iter(stream.with_options(chosen))
per_device = multi_device_iterator_ops.OwnedMultiDeviceIterator(stream, list(devices))
report_result({
    "plain": plain._dataset.options().autotune.enabled,
    "kept": kept._dataset.options().autotune.enabled,
    "per_device": [it._dataset.options().autotune.enabled for it in per_device._device_iterators],
    "source": stream._apply_debug_options().options().autotune.enabled,  # what MultiDeviceIterator reads
    "elements": [b.numpy().tolist() for b in plain],
    "device_batches": [[b.numpy().tolist() for b in per_device.get_next()] for _ in range(2)],
    "again": iterators_end_promptly(),
    "wrapped_once": dataset_ops.DatasetV2._apply_debug_options is wrapped,
    "stream_left_unset": stream.options().autotune.enabled,
})
