"""Sharded training on N JAX devices, counted byte by byte (lesson 13).

What each device holds and what a step moves, measured rather than assumed:
`bytes_per_device` reads an array's shards, `compiled_memory` a compiled step's
memory analysis, `collectives` the collectives XLA compiled into it and the bytes
each one sends (lesson 11's ring law). `memory_formula` is the same count on paper,
`stage_shardings` and `stage_layout_map` say what each ZeRO stage splits (with
jax.sharding, and with Keras' `LayoutMap` where Keras can express it), and
`decision_table` turns measured rates into which strategy fits a per-device budget (or
cannot say).
Importing this module imports neither JAX nor Keras: `setup_devices(n, backend="jax")`
must come first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mgtutor.support.checks import check_whole, is_real

# What each stage splits over the data axis; the rest is a whole copy on every device. FSDP (PyTorch's
# name, fully_shard) is ZeRO-3: weights, gradients and optimizer state all split.
STAGES: dict[str, frozenset[str]] = {
    "DP": frozenset(),
    "ZeRO-1": frozenset({"optimizer"}),
    "ZeRO-2": frozenset({"optimizer", "gradients"}),
    "ZeRO-3": frozenset({"optimizer", "gradients", "weights"}),
    "FSDP": frozenset({"optimizer", "gradients", "weights"}),
}
PARTS = ("weights", "gradients", "optimizer")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
          "f64": 8, "s64": 8, "u64": 8}  # fmt: skip
_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_INSTRUCTION = re.compile(rf"=\s*(?P<shape>\(.*?\)|\S+)\s+(?P<op>{'|'.join(_OPS)})\(")
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


def _check_stage(stage: Any) -> str:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(map(repr, STAGES))}, got {stage!r}.")
    return stage


def splits(shape: Sequence[int], n_devices: int) -> bool:
    """Whether an array of `shape` splits evenly into `n_devices` pieces along its first axis."""
    return len(shape) > 0 and shape[0] % n_devices == 0


# --------------------------------------------------------------------------- measured


def bytes_per_device(arrays: Any, device: Any = None) -> int:
    """Bytes of `arrays` (a jax.Array or any pytree of them) held on `device` (the first device if None).

    Read from each array's `addressable_shards`: a replicated array counts whole on every
    device, an array split N ways counts 1/N.
    """
    import jax

    leaves = jax.tree.leaves(arrays)
    for array in leaves:
        if not hasattr(array, "addressable_shards"):
            raise TypeError(f"bytes_per_device counts jax.Arrays, got {type(array).__name__}.")
    device = jax.devices()[0] if device is None else device
    shards = (shard for array in leaves for shard in array.addressable_shards)
    return sum(shard.data.nbytes for shard in shards if shard.device == device)


@dataclass(frozen=True)
class CompiledMemory:
    """A compiled program's memory on one device, from XLA's `memory_analysis()`."""

    arguments: int
    outputs: int
    temporaries: int
    reused: int  # output bytes written into donated arguments' buffers

    @property
    def peak(self) -> int:
        """Everything the program holds at once at its worst: arguments, outputs and temporaries."""
        return self.arguments + self.outputs + self.temporaries - self.reused


def compiled_memory(compiled: Any) -> CompiledMemory:
    """`CompiledMemory` of a compiled JAX program (``jax.jit(f).lower(...).compile()``), per device."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        raise ValueError("this compiled program has no memory analysis (XLA gives one on CPU, GPU and TPU).")
    return CompiledMemory(analysis.argument_size_in_bytes, analysis.output_size_in_bytes,
                          analysis.temp_size_in_bytes, analysis.alias_size_in_bytes)  # fmt: skip


@dataclass(frozen=True)
class Collective:
    """One collective instruction of a compiled program, as one device runs it."""

    op: str  # "all-reduce", "all-gather", "reduce-scatter", "all-to-all" or "collective-permute"
    result_bytes: int  # the instruction's result on one device
    group: int  # devices that take part together

    @property
    def moved(self) -> float:
        """Bytes one device sends, by the ring (lesson 11): a reduce-scatter and an all-gather move
        (g - 1)/g of the whole each, an all-reduce is the two of them."""
        g = self.group
        if self.op == "collective-permute":
            return float(self.result_bytes)
        if self.op == "reduce-scatter":
            return float((g - 1) * self.result_bytes)  # its input is g results
        share = (g - 1) / g
        return (2 * share if self.op == "all-reduce" else share) * self.result_bytes


def _group_size(line: str, n_devices: int) -> int:
    explicit = re.search(r"replica_groups=\{\{([\d,]*)\}", line)
    if explicit:
        return len(explicit.group(1).split(","))
    named = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if named:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", named.group(1)))
        return math.prod(int(sizes[axis]) for axis in re.findall(r"'(\w+)'", named.group(2)))
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
    if iota:
        return int(iota.group(2))
    if "source_target_pairs" in line:
        return 2
    return n_devices  # replica_groups={}: every device


def _result_bytes(shape: str) -> int:
    arrays = _ARRAY.findall(shape)
    return sum(_BYTES[kind] * math.prod(int(d) for d in dims.split(",") if d) for kind, dims in arrays)


def collectives(compiled: Any, n_devices: int | None = None) -> list[Collective]:
    """The collectives XLA compiled into `compiled` (a compiled program, or its ``as_text()``), in order.

    `n_devices` is the group of an instruction that names none (every device); by default, JAX's count.
    """
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    if n_devices is None:
        import jax

        n_devices = jax.device_count()
    found = []
    for line in text.splitlines():
        match = _INSTRUCTION.search(line)
        if match:
            found.append(Collective(match["op"], _result_bytes(match["shape"]), _group_size(line, n_devices)))
    return found


def bytes_moved(found: Iterable[Collective]) -> dict[str, float]:
    """Bytes one device sends per run of the program, by kind of collective (only the kinds present)."""
    moved: dict[str, float] = {}
    for collective in found:
        moved[collective.op] = moved.get(collective.op, 0.0) + collective.moved
    return moved


def bytes_sent(compiled: Any, n_devices: int | None = None) -> dict[str, float]:
    """Bytes one device sends per run of `compiled`, by kind of collective (`collectives`, `bytes_moved`)."""
    return bytes_moved(collectives(compiled, n_devices))


# --------------------------------------------------------------------------- on paper


def memory_formula(
    stage: str,
    shapes: Mapping[str, Sequence[Sequence[int]]],
    n_devices: int,
    *,
    bytes_per_value: int = 4,
) -> dict[str, int]:
    """Bytes per device of each part under `stage`, on paper: 1/N of what the stage splits, whole the rest.

    `shapes` gives the arrays of each part: ``{"weights": [...], "gradients": [...],
    "optimizer": [...]}`` (Adam: two slots per weight, plus its step count and
    learning rate). An array whose first axis does not split into `n_devices` stays whole.
    """
    _check_stage(stage)
    n_devices = check_whole("n_devices", n_devices, 1)
    unknown = set(shapes) - set(PARTS)
    if unknown:
        raise ValueError(f"shapes has parts {sorted(unknown)}; the parts are {', '.join(PARTS)}.")
    counted = {}
    for part, part_shapes in shapes.items():
        total = 0
        for shape in part_shapes:
            size = math.prod(shape) * bytes_per_value
            split = part in STAGES[stage] and splits(shape, n_devices)
            total += size // n_devices if split else size
        counted[part] = total
    return counted


# --------------------------------------------------------------------------- layouts


def stage_shardings(
    stage: str, arrays: Sequence[Any], part: str, mesh: Any, axis: str = "batch"
) -> list[Any]:
    """A `NamedSharding` for each of `arrays` (one part: weights, gradients or optimizer) under `stage`.

    What the stage splits is cut along its first axis over the mesh axis `axis`, when that
    axis divides it; everything else is replicated (``PartitionSpec()``).
    """
    from jax.sharding import NamedSharding, PartitionSpec

    _check_stage(stage)
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}.")
    n = mesh.shape[axis]
    split = part in STAGES[stage]
    return [NamedSharding(mesh, PartitionSpec(axis) if split and splits(a.shape, n) else PartitionSpec())
            for a in arrays]  # fmt: skip


def stage_layout_map(stage: str, variables: Iterable[Any], device_mesh: Any, axis: str = "batch") -> Any:
    """Keras' `LayoutMap` for `stage`: each variable's path mapped to its `TensorLayout`.

    DP maps nothing (every variable replicated). ZeRO-3 and FSDP split every variable whose
    first axis the mesh axis divides; Keras gives the optimizer's slots their variable's layout,
    and the gradient of a split variable comes out split. ZeRO-1 and ZeRO-2 cannot be said
    with a LayoutMap: the slots always follow their variable (a key for a slot's path is never
    read), and gradients are not variables. For those, `stage_shardings` says it with jax.sharding.
    """
    _check_stage(stage)
    if stage in ("ZeRO-1", "ZeRO-2"):
        raise ValueError(
            f"{stage} splits the optimizer's slots{' and the gradients' if stage == 'ZeRO-2' else ''} "
            "but not "
            "the weights, which a Keras LayoutMap cannot say: Keras gives every slot its weight's layout, "
            "and gradients are not variables. Use stage_shardings(...) with jax.jit, or ZeRO-3."
        )
    import keras

    layout_map = keras.distribution.LayoutMap(device_mesh)
    n = dict(zip(device_mesh.axis_names, device_mesh.shape, strict=True))[axis]
    for variable in variables:
        if "weights" in STAGES[stage] and splits(variable.shape, n):
            layout_map[re.escape(variable.path)] = (axis,) + (None,) * (len(variable.shape) - 1)
    return layout_map


# --------------------------------------------------------------------------- deciding


@dataclass(frozen=True)
class Rates:
    """One strategy's measured costs on one device: per parameter, and per byte of each example.

    A step's peak is its arrays (the state as the strategy splits it, and its share of the batch's input)
    plus its temporaries: a floor that is there at any batch (on N devices, the whole gradient waiting for
    its all-reduce, or a gathered layer) and the activations of the examples it holds. How much of the
    activations adds to the floor is XLA's schedule: none, where they die before the gradient is whole and
    take its buffers; all, where they live beside it. So the peak lies between the arrays plus the floor
    and the arrays plus both.
    """

    bytes_per_parameter: float  # the arrays: weights, gradients and optimizer state, as split
    example_share: float  # the share of each example's activation bytes one device holds
    moved_per_parameter: float  # bytes one device sends per step, per parameter
    moved_per_activation: float = 0.0  # ... and per activation byte of the global batch (tensor parallelism)
    temporaries_per_parameter: float = 0.0  # the floor of the step's temporaries, at any batch
    input_share: float | None = None  # the share of each example's input; None: example_share
    # False where XLA may write the gradient straight into the step's outputs, so that even the floor is not
    # sure to be there (lesson 18's stages): then the floor counts toward the high end of the range only.
    floor_certain: bool = True

    def __post_init__(self) -> None:
        for name in ("bytes_per_parameter", "example_share", "moved_per_parameter", "moved_per_activation",
                     "temporaries_per_parameter", "input_share"):  # fmt: skip
            value = getattr(self, name)
            if not (value is None and name == "input_share"):
                _check_bytes(f"Rates.{name}", value, 0, strict=False)


def _check_bytes(name: str, value: Any, low: float, strict: bool) -> float:
    if not (is_real(value) and (value > low if strict else value >= low)):
        raise ValueError(f"{name} must be a number of bytes {'>' if strict else '>='} {low}, got {value!r}.")
    return float(value)


VERDICTS = {True: "fits", False: "too big", None: "cannot say"}


def _why(fits: bool | None, low: float, high: float, budget: float, floor_certain: bool = True) -> str:
    mib = 2**20
    if fits:
        return f"even with no buffer shared, {high / mib:.1f} MiB <= the budget"
    if fits is False:
        held = "the arrays and the floor" if floor_certain else "the arrays"
        return f"{held} alone, {low / mib:.1f} MiB, exceed the budget"
    what = "of activations add to the floor" if floor_certain else "of temporaries (floor, activations) add"
    return (
        f"the budget lies between {low / mib:.1f} and {high / mib:.1f} MiB: it fits only if at most "
        f"{(budget - low) / mib:.1f} of the {(high - low) / mib:.1f} MiB {what}, which XLA's schedule decides"
    )


def decision_table(
    parameters: int,
    activation_bytes: float,
    batch: int,
    budget_bytes: float,
    rates: Mapping[str, Rates | Mapping[str, float]],
    *,
    input_bytes: float = 0.0,
) -> list[dict[str, Any]]:
    """Per strategy: the range of bytes per device, whether they fit `budget_bytes`, and bytes sent per step.

    For a model of `parameters` whose examples keep `activation_bytes` each (and take `input_bytes`
    as input), a global `batch`, from each strategy's measured `rates` (a `Rates`, or a dict of its
    fields). `low_bytes` is the arrays plus the temporaries' floor, `high_bytes` adds the activations
    (see `Rates`; with ``floor_certain=False`` the floor moves from the low end to the high end). `fits`
    is True where even the high fits, False where even the low does not, and None ("cannot say") where
    the budget lies between them; `verdict` says it in words, `why` says why.
    """
    parameters = check_whole("parameters", parameters, 1)
    batch = check_whole("batch", batch, 1)
    activation_bytes = _check_bytes("activation_bytes", activation_bytes, 0, strict=False)
    input_bytes = _check_bytes("input_bytes", input_bytes, 0, strict=False)
    budget_bytes = _check_bytes("budget_bytes", budget_bytes, 0, strict=True)
    rows = []
    for name, rate in rates.items():
        rate = rate if isinstance(rate, Rates) else Rates(**rate)
        input_share = rate.example_share if rate.input_share is None else rate.input_share
        floor = rate.temporaries_per_parameter * parameters
        low = rate.bytes_per_parameter * parameters + input_share * input_bytes * batch
        low += floor if rate.floor_certain else 0.0
        high = low + rate.example_share * activation_bytes * batch + (0.0 if rate.floor_certain else floor)
        fits = True if high <= budget_bytes else False if low > budget_bytes else None
        moved = rate.moved_per_parameter * parameters + rate.moved_per_activation * activation_bytes * batch
        rows.append({"strategy": name, "low_bytes": low, "high_bytes": high, "fits": fits,
                     "verdict": VERDICTS[fits],
                     "why": _why(fits, low, high, budget_bytes, rate.floor_certain),
                     "bytes_moved_per_step": moved})  # fmt: skip
    return rows
