"""The training engines, for those who train beyond `fit`. Public names come from `mgtutor`.

- `plan`: `FitPlan`, a fit's arguments checked once; both engines read only it.
- `resume`: `resumable_fit`, Keras ``fit`` that a run killed mid-epoch continues to the same weights.
- `trainer`: `Trainer`, one ``strategy.run`` loop for one device, N devices and N machines;
  `losses` makes its loss and metrics per-example; `accumulation` sums k batches' gradients before
  the update's one all-reduce.
- `feeding`: the batch order both engines replay, and each replica's slice of a global batch.
- `checkpoints`: the one checkpoint engine of both (state file, refusals, `resume_point`); `runlock`,
  one run at a time on a checkpoint folder.
- `worker`: what a worker script uses (`multi_worker_strategy`, `TF_CONFIG`, `weights_digest`).
- `doctor` (`python -m mgtutor doctor`): a worker script read for branches that part the collectives
  (`branches`), then run under watch (`stacks`, `watched`): where each worker was, each finding with its fix.
- `cluster`: `launch`, a multi-worker job on this machine, and what it reports (`job_result`); `netns`,
  the loopback-only network namespace its workers run in; `proctree`, a process and everything it
  started, killed alike everywhere; `pinning`, each worker on cores of its own (``cores_per_worker``),
  before TensorFlow starts.
- `parameter_averaging`: seed 004's `ParallelWrapper` (deeplearning4j's), workers' copies averaged every
  few rounds; `worker_batches`, the batches it deals them, read ahead in a thread.
- `pipeline`: lesson 18's pipeline parallelism, a Keras model cut by depth into stages, each in a
  pinned worker process, run under the GPipe or the 1F1B schedule, its bubble timed per stage.
- `capstone`: lesson 16's recipe, generated from the lesson, for its benchmark and its tests; of the
  package only `make check`'s child that times its step imports it.
- `slurm`: a real two-node Slurm cluster on this machine (`cluster/slurm/local_cluster.sh`: network and
  UTS namespaces joined by a veth), driven as a user on its head node would (lesson 17, its tests).
"""
