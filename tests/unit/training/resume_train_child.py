"""The training run of test_resume.py's kill test: one resumable run, killed and started again.

    python tests/unit/training/resume_train_child.py N_DEVICES CKPT OUT PAUSES_JSON

The test starts it, SIGKILLs it mid-epoch (when it prints PAUSED and its
resume point) and starts it again with the very same command line: the k-th
start pauses after PAUSES_JSON[k] batches. At the end it saves its weights as
OUT.npz and reports its History with `report_result`.
"""

import contextlib
import json
import os
import sys
import time

from mgtutor.devices import setup_devices

n_devices, ckpt, out, pauses = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
setup_devices(n_devices, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mgtutor.data_parallel import mirrored_strategy  # noqa: E402
from mgtutor.models import build_seed_cnn  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.checkpoints import resume_point  # noqa: E402
from mgtutor.training.resume import resumable_fit  # noqa: E402

# The k-th start of this command stops for the kill after pauses[k] batches.
starts_log = out + ".starts"
starts = len(open(starts_log).read().split()) if os.path.exists(starts_log) else 0
with open(starts_log, "a") as log:
    log.write("start\n")
pause_after = pauses[starts] if starts < len(pauses) else None

rng = np.random.default_rng(0)
x = rng.random((300, 16, 16, 3), dtype=np.float32)  # 10 batches of 32, the last one of 12
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 300)]
x_val = rng.random((64, 16, 16, 3), dtype=np.float32)
y_val = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
strategy = mirrored_strategy() if n_devices > 1 else None
with strategy.scope() if strategy else contextlib.nullcontext():
    model = build_seed_cnn((16, 16, 3), 10, seed=0)  # with Dropout: its random state must resume too
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=False)


class PauseForKill(keras.callbacks.Callback):
    batches = 0

    def on_train_batch_end(self, batch, logs=None):
        PauseForKill.batches += 1
        if PauseForKill.batches == pause_after:
            print("PAUSED", json.dumps(resume_point(ckpt)), flush=True)
            time.sleep(300)


history = resumable_fit(model, x, y, checkpoint_dir=ckpt, epochs=3, batch_size=32, checkpoint_every_steps=2,
                        seed=7, strategy=strategy, callbacks=[PauseForKill()], verbose=0,
                        validation_data=(x_val, y_val))
np.savez(out + ".npz", *model.get_weights())
report_result({"epoch": history.epoch, "history": history.history, "resumed_from": history.resumed_from,
               "batches": PauseForKill.batches})  # fmt: skip
