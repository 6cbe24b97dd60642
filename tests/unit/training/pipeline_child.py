"""The child process of test_pipeline.py: a Keras MLP cut into stages, each in a worker of its own.

    python tests/unit/training/pipeline_child.py

Keras on JAX in a fresh process: the one-device step's gradients (jax.grad of the batch's mean
loss) beside the pipeline's, for GPipe and 1F1B, m = 1 and 4, on 2 workers (pinned where there are
2 cores) and on 4 unpinned ones; the activations each stage held at its peak; a batch that m does
not divide, refused. It reports what it saw with `report_result`; the parent asserts. The workers
are started with multiprocessing's spawn, which imports this file again: hence the main guard.
"""

import os
import time

os.environ["KERAS_BACKEND"] = "jax"


def main() -> None:
    import jax
    import keras
    import numpy as np

    from mgtutor.support.processes import report_result
    from mgtutor.training.pinning import usable_cores
    from mgtutor.training.pipeline import Pipeline

    keras.utils.set_random_seed(0)
    hidden = [keras.layers.Dense(64, activation="gelu") for _ in range(4)]
    model = keras.Sequential([keras.Input((48,)), *hidden, keras.layers.Dense(10)])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 48)).astype("float32")
    y = np.eye(10, dtype="float32")[rng.integers(0, 10, 32)]
    weights = [v.value for v in model.trainable_variables]

    def loss(w):
        logits = model.stateless_call(w, [], x)[0]
        return keras.ops.mean(keras.losses.categorical_crossentropy(y, logits, from_logits=True))

    one_device = [np.asarray(g) for g in jax.grad(loss)(weights)]
    out = {"largest_gradient": max(float(np.abs(g).max()) for g in one_device), "loss": float(loss(weights))}
    for p, cores in ((2, 1 if len(usable_cores()) >= 2 else None), (4, None)):
        with Pipeline(model, p, cores_per_worker=cores) as pipe:
            out[f"p{p}_stages"] = [len(stage) for stage in pipe.stages]
            for kind in ("GPipe", "1F1B"):
                for m in (1, 4):
                    step = pipe.step(kind, x, y, m)
                    pairs = list(zip(step.gradients, one_device, strict=True))
                    out[f"p{p} {kind} m{m}"] = {
                        "difference": [float(np.abs(a - b).max()) for a, b in pairs],
                        "shapes_equal": [a.shape == b.shape for a, b in pairs],
                        "loss": step.loss, "peak_bytes": step.peak_bytes,
                        "computes": [sorted((op, i) for op, i, _, _ in t) for t in step.timelines],
                        "idle": step.idle_fractions(), "seconds": step.seconds,
                        "longest_compute": max(e - b for t in step.timelines for *_, b, e in t)}  # fmt: skip
            try:
                pipe.step("GPipe", x[:30], y[:30], 4)
            except ValueError as err:
                out[f"p{p}_refused"] = str(err)
    with Pipeline(model, 2, cores_per_worker=None) as pipe:  # a worker killed: an error, not a hang
        pipe._processes[1].kill()
        started = time.monotonic()
        try:
            pipe.step("GPipe", x, y, 2)
        except RuntimeError as err:
            out["killed"] = {"error": str(err), "seconds": time.monotonic() - started,
                             "alive_after": [process.is_alive() for process in pipe._processes]}
    report_result(out)


if __name__ == "__main__":
    main()
