"""The child process of test_saving.py's crash test: a save killed (SIGKILL) midway.

    python tests/unit/killed_save_child.py FOLDER

Saves a model as FOLDER/model.keras (and its outputs as good.npy), then saves
another model over it and kills itself between writing the weights and the
zip index. It prints "saving" and never "survived"; the parent checks what is
left in FOLDER.
"""

import os
import signal
import sys
import zipfile

import numpy as np

from mgtutor import saving
from mgtutor.models import build_seed_cnn

FOLDER = sys.argv[1]
target = os.path.join(FOLDER, "model.keras")
model = build_seed_cnn((16, 16, 3), 10, seed=0)
saving.save_model(model, target)  # the good file
probe = np.random.default_rng(0).random((8, 16, 16, 3), dtype=np.float32)
np.save(os.path.join(FOLDER, "good.npy"), np.asarray(model(probe, training=False)))
model.set_weights([w + 1.0 for w in model.get_weights()])  # another model, saved over it

real_writestr = zipfile.ZipFile.writestr


def writestr_then_die(self, *args, **kwargs):
    # Keras writes the weights into the archive, then the zip index at close:
    # dying in between leaves a file with most bytes written but no index.
    real_writestr(self, *args, **kwargs)
    self.fp.flush()
    os.kill(os.getpid(), signal.SIGKILL)


zipfile.ZipFile.writestr = writestr_then_die
print("saving", flush=True)
saving.save_model(model, target)
print("survived", flush=True)
