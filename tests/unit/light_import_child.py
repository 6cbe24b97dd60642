"""The child program of test_models.py and test_packaging.py: what importing one module loads.

    python tests/unit/light_import_child.py MODULE

Imports MODULE in a fresh interpreter and reports, with `report_result`, which of
TensorFlow, JAX, Keras and matplotlib that import loaded (device set-up must come first).
"""

import importlib
import sys

importlib.import_module(sys.argv[1])
heavy = sorted(name for name in ("tensorflow", "jax", "keras", "matplotlib") if name in sys.modules)

from mgtutor.support.processes import report_result  # noqa: E402  (after the measurement)

report_result({"loaded": heavy})
