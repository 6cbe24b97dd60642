"""The child program of test_devices.py: device set-up in a fresh process, as a notebook's first cells do.

    python tests/unit/devices_child.py first    # setup_devices(4) before TensorFlow starts, then again
    python tests/unit/devices_child.py late     # TensorFlow started first, then setup_devices(2) and (1)
    python tests/unit/devices_child.py jax      # setup_devices(4, backend="jax") first, again, then 2
    python tests/unit/devices_child.py jax-late # Keras imported on TensorFlow first, then backend="jax"

It reports what it saw with `report_result`; the parent asserts.
"""

import contextlib
import io
import sys

from mgtutor import DeviceSetupError, setup_devices
from mgtutor.support.processes import report_result

if sys.argv[1] == "first":
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        first = setup_devices(4)
    again = setup_devices(4, verbose=False)
    import tensorflow as tf

    with tf.device(first[3]):
        where = tf.constant(1.0).device
    report_result({"names": list(first), "kind": first.kind, "again": list(again), "where": where,
                   "logical": len(tf.config.list_logical_devices("CPU")), "printed": printed.getvalue()})
elif sys.argv[1] == "jax":
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        first = setup_devices(4, backend="jax")
    again = setup_devices(4, backend="jax", verbose=False)
    import jax
    import keras

    try:
        setup_devices(2, backend="jax", verbose=False)
        refused = ""
    except DeviceSetupError as err:
        refused = str(err)
    sharded = jax.device_put(jax.numpy.arange(8.0), jax.sharding.NamedSharding(
        jax.sharding.Mesh(jax.devices(), ("batch",)), jax.sharding.PartitionSpec("batch")))  # fmt: skip
    report_result({"names": list(first), "kind": first.kind, "again": list(again),
                   "printed": printed.getvalue(), "backend": keras.config.backend(), "refused": refused,
                   "shards": sorted(str(s.device) for s in sharded.addressable_shards),
                   "tensorflow_imported": "tensorflow" in sys.modules})  # fmt: skip
elif sys.argv[1] == "jax-late":
    import keras

    try:
        setup_devices(2, backend="jax", verbose=False)
        refused = ""
    except DeviceSetupError as err:
        refused = str(err)
    report_result({"backend": keras.config.backend(), "refused": refused})
else:
    import tensorflow as tf

    tf.constant(1.0)  # the runtime starts with its default single CPU
    messages = []
    for n in (2, 1):
        try:
            messages.append(list(setup_devices(n, verbose=False)))
        except DeviceSetupError as err:
            messages.append(str(err))
    report_result({"messages": messages})
