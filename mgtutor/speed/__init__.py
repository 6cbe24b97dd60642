"""The scaling study (notebook 08, ``python -m mgtutor.speed.study``); data flows one way.

- `study`: `scaling_study`, its arguments checked once, each device count measured in its own process.
- `measure`: throughput measured in this process (the study's child, the input pipeline alone).
- `reading`: what the runs say (speed-up, efficiency, the bottleneck); plain arithmetic.
- `figure`: `plot_scaling`, a reading drawn as it is; `amdahl`: `projected_scaling` for real GPUs.
- `link`: lesson 14's link between pinned workers, fitted as latency + bytes / bandwidth, and the step
  lesson 11's ring model predicts from it; `cluster_link`: the same between the two Slurm nodes of
  `mgtutor.training.slurm` (lesson 17), shaped to a rate, and the 2-node step set beside its prediction.
"""
