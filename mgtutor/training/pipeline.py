"""Pipeline parallelism by hand (lesson 18): a Keras model cut by depth into stages, one process each.

A stage is a run of the model's layers. Stage s takes its input from stage s - 1 and hands its output
to stage s + 1 (the **forward**, F); on the way back it takes the gradient of its output from stage
s + 1 and hands the gradient of its input to stage s - 1 (the **backward**, B). A batch is cut into
m **microbatches** so that the stages can work at once, each on another microbatch.

- `pipeline_schedule(kind, p, m)`: GPipe (every forward, then every backward) or 1F1B (PipeDream-Flush:
  after a few forwards, one forward then one backward) as each stage's order of steps, and the same
  steps placed in time slots of one step each: the slots where a stage has nothing to do are its
  **bubble**, (p - 1) / (m + p - 1) of the slots under both schedules.
- `Pipeline`: p worker processes, each pinned to a core of its own (lesson 14's devices that own their
  compute) and running one stage with Keras on JAX; activations and gradients cross between them as
  bytes through the kernel (pipes), where GPUs would use NVLink. Each step's gradients come back
  with a timeline of every stage's compute and the activations each stage held at its peak.

Importing this module imports neither JAX nor Keras: the workers import them once they are pinned.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from mgtutor.support.checks import check_whole

KINDS = ("GPipe", "1F1B")


def _check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}.")
    return kind


def stage_orders(kind: str, p: int, m: int) -> list[list[tuple[str, int]]]:
    """Each stage's steps in the order it runs them: ("F" or "B", microbatch)."""
    _check_kind(kind)
    p, m = check_whole("p", p, 1), check_whole("m", m, 1)
    forwards, backwards = [("F", i) for i in range(m)], [("B", i) for i in range(m)]
    if kind == "GPipe":
        return [forwards + backwards for _ in range(p)]
    orders = []
    for stage in range(p):
        warmup = min(p - 1 - stage, m)  # forwards before the first backward: the later stages' share
        steady = [step for i in range(m - warmup) for step in (forwards[warmup + i], backwards[i])]
        orders.append(forwards[:warmup] + steady + backwards[m - warmup :])
    return orders


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: each stage's order, and the same steps placed in time slots of one step."""

    kind: str
    p: int
    m: int
    orders: list[list[tuple[str, int]]]
    slots: list[list[tuple[int, str, int]]]  # per time slot, the (stage, op, microbatch) steps run in it

    @property
    def formula(self) -> float:
        """The bubble on paper: (p - 1) / (m + p - 1)."""
        return (self.p - 1) / (self.m + self.p - 1)

    def idle_slots(self) -> list[int]:
        """Per stage, the time slots in which it runs nothing."""
        busy = [0] * self.p
        for slot in self.slots:
            for stage, _, _ in slot:
                busy[stage] += 1
        return [len(self.slots) - b for b in busy]

    def in_flight(self) -> list[int]:
        """Per stage, the most microbatches whose forward has run and whose backward has not."""
        held, peak = [0] * self.p, [0] * self.p
        for slot in self.slots:
            for stage, op, _ in slot:
                held[stage] += 1 if op == "F" else -1
                peak[stage] = max(peak[stage], held[stage])
        return peak


def pipeline_schedule(kind: str, p: int, m: int) -> Schedule:
    """`kind` ("GPipe" or "1F1B") for `p` stages and `m` microbatches, each step one time slot.

    A step runs in the first slot after the step it waits for (a forward for the previous stage's
    forward of the same microbatch, a backward for the next stage's backward) and after its
    stage's step before it.
    """
    orders = stage_orders(kind, p, m)
    done: dict[tuple[int, str, int], int] = {}  # step -> the slot it ran in
    free = [0] * p  # each stage's first free slot
    position = [0] * p
    while any(position[s] < len(orders[s]) for s in range(p)):
        for stage in range(p):
            if position[stage] == len(orders[stage]):
                continue
            op, i = orders[stage][position[stage]]
            waits = (stage - 1, "F", i) if op == "F" else (stage + 1, "B", i)
            if op == "B" and stage == p - 1:
                waits = (stage, "F", i)
            if (op == "F" and stage == 0) or waits in done:
                slot = max(free[stage], done.get(waits, -1) + 1)
                done[(stage, op, i)], free[stage] = slot, slot + 1
                position[stage] += 1
    slots: list[list[tuple[int, str, int]]] = [[] for _ in range(max(done.values()) + 1)]
    for (stage, op, i), slot in sorted(done.items(), key=lambda item: item[1]):
        slots[slot].append((stage, op, i))
    return Schedule(kind, p, m, orders, slots)


def cut(layers: list[Any], p: int) -> list[list[Any]]:
    """`layers` in `p` runs of consecutive layers with about equal parameters (each at least one layer).

    The s-th cut falls after the layer whose running total of parameters is nearest s/p of the whole.
    """
    p = check_whole("p", p, 1)
    if p > len(layers):
        raise ValueError(f"p = {p} stages need at least {p} layers with weights, the model has "
                         f"{len(layers)}: pass a smaller p.")
    running, total = [], 0
    for layer in layers:
        total += layer.count_params()
        running.append(total)
    ends = []
    for s in range(1, p):
        lowest = ends[-1] + 1 if ends else 1  # a stage holds at least one layer
        highest = len(layers) - (p - s)
        ends.append(min(range(lowest, highest + 1), key=lambda end: abs(running[end - 1] - total * s / p)))
    bounds = [0, *ends, len(layers)]
    return [layers[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def check_microbatches(batch: int, m: Any) -> int:
    """`m`, when it divides `batch`: else a ValueError naming both and the nearest m that do."""
    m = check_whole("microbatches", m, 1)
    if batch % m:
        near = [d for d in range(1, batch + 1) if batch % d == 0]
        below, above = max(d for d in near if d < m), min((d for d in near if d > m), default=None)
        raise ValueError(
            f"microbatches={m} does not divide the batch of {batch} examples into equal microbatches; "
            f"pass microbatches={below}" + (f" or {above}" if above else "") + ", or a batch that m divides."
        )
    return m


# --------------------------------------------------------------------------- the workers


def _stage_functions(configs: list[dict], input_width: int, last: bool) -> tuple[Any, Any, Any]:
    """One stage's Keras layers, and its jitted forward (with the loss on the last stage) and backward."""
    import jax
    import keras

    stage = keras.Sequential([keras.Input((input_width,))] + [keras.saving.deserialize_keras_object(c)
                                                              for c in configs])  # fmt: skip

    def forward(weights, x):
        return stage.stateless_call(weights, [], x)[0]

    def with_loss(weights, x, y, batch):  # the microbatch's share of the batch's mean loss
        losses = keras.losses.categorical_crossentropy(y, forward(weights, x), from_logits=True)
        return keras.ops.sum(losses) / batch

    if last:
        run = jax.jit(lambda w, x, y, batch: jax.vjp(lambda w, x: with_loss(w, x, y, batch), w, x))
    else:
        run = jax.jit(lambda w, x, y, batch: jax.vjp(forward, w, x))
    return stage, run, jax.jit(lambda vjp, g: vjp(g))


def _sender(connection: Any) -> queue.Queue:
    """A queue whose items a thread sends on `connection`: a send never waits for the receiver."""
    outbox: queue.Queue = queue.Queue()

    def send() -> None:
        while (item := outbox.get()) is not None:
            connection.send(item)

    threading.Thread(target=send, daemon=True).start()
    return outbox


def _activation_bytes(vjp: Any, rows: int, weight_shapes: set) -> int:
    """Bytes a stored backward holds for its microbatch: its saved arrays with one row per example."""
    import jax

    saved = [a for a in jax.tree.leaves(vjp) if a.ndim and tuple(a.shape) not in weight_shapes]
    return sum(a.nbytes for a in saved if a.shape[0] == rows)


def _run_steps(job: dict, run: Any, backward: Any, weights: list, links: tuple) -> dict:
    """One pipeline step on this stage: its steps in order, each compute timed, gradients summed."""
    import jax
    import numpy as np

    previous, following, rows = links[0], links[1], job["rows"]
    stored, held, peak, timeline, summed, loss = {}, 0, 0, [], None, 0.0
    shapes = {tuple(w.shape) for w in weights}
    for op, i in job["order"]:
        if op == "F":
            x = job["x"][i] if previous is None else previous[0].recv()
            started = time.monotonic()
            out, vjp = jax.block_until_ready(run(weights, x, job["y"][i] if following is None else None,
                                                 job["batch"]))  # fmt: skip
            timeline.append(("F", i, started, time.monotonic()))
            stored[i] = vjp
            held += _activation_bytes(vjp, rows, shapes)
            peak = max(peak, held)
            if following is None:
                loss += float(out)
            else:
                following[1].put(np.asarray(out))
        else:
            g = np.float32(1.0) if following is None else following[0].recv()
            vjp = stored.pop(i)
            held -= _activation_bytes(vjp, rows, shapes)
            started = time.monotonic()
            grads, grad_input = jax.block_until_ready(backward(vjp, g))
            timeline.append(("B", i, started, time.monotonic()))
            summed = grads if summed is None else jax.tree.map(lambda a, b: a + b, summed, grads)
            if previous is not None:
                previous[1].put(np.asarray(grad_input))
    return {"gradients": [np.asarray(g) for g in summed], "timeline": timeline, "peak_bytes": peak,
            "loss": loss}  # fmt: skip


def _worker(stage: int, cores: tuple[int, ...] | None, control: Any, previous: Any, following: Any) -> None:
    """Stage `stage`'s process: pinned first, then JAX on one device, then steps until told to stop."""
    if cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))  # before JAX starts its threads: they all inherit the core
    os.environ.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
                      XLA_FLAGS="--xla_force_host_platform_device_count=1")
    import jax
    import numpy as np

    configs, input_width, weights = control.recv()
    last = following is None
    _, run, backward = _stage_functions(configs, input_width, last)
    weights = [jax.numpy.asarray(w) for w in weights]
    links = tuple(None if c is None else (c, _sender(c)) for c in (previous, following))
    while (job := control.recv()) is not None:
        # Compile for this microbatch's shape outside the timed step: one forward and one backward.
        x = job["x"][0] if previous is None else np.zeros((job["rows"], input_width), "float32")
        out, vjp = run(weights, x, job["y"][0] if last else None, job["batch"])
        jax.block_until_ready(backward(vjp, np.float32(1.0) if last else np.zeros(out.shape, "float32")))
        control.send("ready")
        control.recv()  # every stage starts at once
        control.send(_run_steps(job, run, backward, weights, links))


@dataclass(frozen=True)
class PipelineStep:
    """What one pipeline step gave: the gradients (the model's order), the loss, and per stage its
    timeline of computes (op, microbatch, start, end in seconds) and its stored activations' peak."""

    schedule: Schedule
    gradients: list[Any]
    loss: float
    timelines: list[list[tuple[str, int, float, float]]]
    peak_bytes: list[int]

    @property
    def seconds(self) -> float:
        """The step's length: from the first compute of any stage to the end of the last."""
        return max(t[3] for tl in self.timelines for t in tl) - min(t[2] for tl in self.timelines for t in tl)

    def busy_seconds(self) -> list[float]:
        """Per stage, the seconds it computed in the step: its timeline's computes added up."""
        return [sum(t[3] - t[2] for t in timeline) for timeline in self.timelines]

    def idle_fractions(self) -> list[float]:
        """Per stage, the share of the step (first compute of any stage to the last) it did not compute."""
        return [1 - busy / self.seconds for busy in self.busy_seconds()]


class Pipeline:
    """A Keras model's Dense-like layers cut into `p` stages, each in a worker process of its own.

    ``cores_per_worker=1`` pins each worker to a core of its own (refused when there are too few);
    None leaves them unpinned, sharing the cores. Use it as a context manager, or call `close`.
    """

    def __init__(self, model: Any, p: int, *, cores_per_worker: int | None = 1) -> None:
        import keras

        from mgtutor.training.pinning import plan

        self.stages = Pipeline.cut(model, p)
        self.p = len(self.stages)
        cores = plan(self.p, cores_per_worker)
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no JAX state inherited
        links = [context.Pipe() for _ in range(self.p - 1)]  # (stage s's end, stage s + 1's end)
        self._controls, self._processes, self.cores = [], [], cores
        for s, here in enumerate(self.stages):
            ours, theirs = context.Pipe()
            previous = links[s - 1][1] if s > 0 else None
            following = links[s][0] if s < self.p - 1 else None
            where = None if cores is None else cores[s]
            arguments = (s, where, theirs, previous, following)
            process = context.Process(target=_worker, args=arguments, daemon=True)
            process.start()
            theirs.close()  # the worker's end lives in the worker alone: if it dies, our recv sees the end
            self._controls.append(ours)
            self._processes.append(process)
            # The stage's layers as Keras configs, and their weights: the worker builds its own copy.
            configs = [keras.saving.serialize_keras_object(layer) for layer in here]
            weights = [w for layer in here for w in layer.get_weights()]
            self._send(s, (configs, int(here[0].input.shape[-1]), weights))
        for end in (end for link in links for end in link):
            end.close()  # so a stage whose neighbour dies sees the end of their link instead of waiting on it

    @staticmethod
    def cut(model: Any, p: int) -> list[list[Any]]:
        """The stages `Pipeline(model, p)` would run: `model`'s layers with weights, cut by `cut`."""
        return cut([layer for layer in model.layers if layer.weights], p)

    def step(self, kind: str, x: Any, y: Any, microbatches: int) -> PipelineStep:
        """One step on the batch (x, y) cut in `microbatches` under `kind`: the gradients of the mean loss."""
        import numpy as np

        m = check_microbatches(len(x), microbatches)
        schedule = pipeline_schedule(kind, self.p, m)
        xs, ys = np.split(np.asarray(x, "float32"), m), np.split(np.asarray(y, "float32"), m)
        for s in range(self.p):
            self._send(s, {"order": schedule.orders[s], "rows": len(x) // m, "batch": len(x),
                           "x": xs if s == 0 else None, "y": ys if s == self.p - 1 else None})  # fmt: skip
        for s in range(self.p):
            self._receive(s)  # "ready": compiled for this shape
        for s in range(self.p):
            self._send(s, "go")
        results = [self._receive(s) for s in range(self.p)]
        return PipelineStep(schedule, [g for r in results for g in r["gradients"]], results[-1]["loss"],
                            [r["timeline"] for r in results], [r["peak_bytes"] for r in results])  # fmt: skip

    def _send(self, s: int, item: Any) -> None:
        try:
            self._controls[s].send(item)
        except (BrokenPipeError, ConnectionResetError):
            raise self._ended() from None

    def _receive(self, s: int) -> Any:
        try:
            return self._controls[s].recv()
        except (EOFError, ConnectionResetError):
            raise self._ended() from None

    def _ended(self) -> RuntimeError:
        """The error for a worker that is gone: which stages ended, how, and the likely fix."""
        deadline = time.monotonic() + 5  # a neighbour of the dead one ends too, on its link's end
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        codes = ", ".join(f"stage {s} exit code {p.exitcode}" for s, p in enumerate(self._processes)
                          if not p.is_alive())  # fmt: skip
        # The pipeline is broken either way. A stage still starting (a slow hour) would print its own
        # traceback after this error, burying the fix below it: stop the rest before raising.
        alive = [process for process in self._processes if process.is_alive()]
        for process in alive:
            process.terminate()
            process.join(timeout=5)
        stopped = "; the others were stopped" if alive else ""
        return RuntimeError(
            f"A pipeline worker process ended ({codes or 'none ended yet'}{stopped}); its traceback, if "
            "any, is on stderr above. In a script, create the Pipeline under "
            "`if __name__ == \"__main__\":`: the workers start by spawning a fresh Python, which imports "
            "the script again. "
            "Make a new Pipeline to go on.")

    def close(self) -> None:
        """Stop the workers (those still running)."""
        for control in self._controls:
            try:
                control.send(None)
            except (BrokenPipeError, ConnectionResetError):
                pass  # that worker has already ended
        for process in self._processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
