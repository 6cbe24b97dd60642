"""The training engines: `resumable_fit` (Keras fit) and `Trainer` (a strategy.run loop), the plan both
read, their checkpoints and batch order, and the multi-worker launcher. Public names come from `mgtutor`."""
