"""The training engines, for those who train beyond `fit`. Public names come from `mgtutor`.

- `plan`: `FitPlan`, a fit's arguments checked once; both engines read only it.
- `resume`: `resumable_fit`, Keras ``fit`` that a run killed mid-epoch continues to the same weights.
- `trainer`: `Trainer`, one ``strategy.run`` loop for one device, N devices and N machines;
  `losses` makes its loss and metrics per-example; `accumulation` sums k batches' gradients before
  the update's one all-reduce.
- `feeding`: the batch order both engines replay, and each replica's slice of a global batch.
- `checkpoints`: the one checkpoint engine of both (state file, refusals, `resume_point`).
- `worker`: what a worker script uses (`multi_worker_strategy`, `TF_CONFIG`, `weights_digest`).
- `cluster`: `launch`, a multi-worker job on this machine; `netns`, the loopback-only network
  namespace its workers run in; `proctree`, a process and everything it started, killed alike everywhere;
  `pinning`, each worker on cores of its own (``cores_per_worker``), before TensorFlow starts.
"""
