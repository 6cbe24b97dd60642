"""The teacher's guide's "what learners should see": every lesson's key figures, from one run's records.

`learners_block(summary)` writes one bullet per topic from what the notebooks record with
`mgtutor.record` in a `make run` (its summary.json), so the guide shows the teacher's own
machine's numbers: ``python -m mgtutor.classroom.run_tables`` puts it between the guide's
``<!-- generated:learners begin -->`` and ``end`` markers. A notebook the run did not hold
gives no bullet; a bullet never states a figure the run did not print.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mgtutor.speed.link import ratio_figure
from mgtutor.speed.reading import why_faster, why_slower

Records = dict[str, dict[str, Any]]  # "02" -> that notebook's records
# What each bullet reads of each lesson's records (the tests check that every lesson records these).
READS: dict[str, tuple[str, ...]] = {
    "02": ("test_accuracy",),
    "03": ("mirrored_val_accuracy", "allreduce_vs_one_device", "mistake_factor", "slice_sizes"),
    "04": ("towers_val_accuracy", "parity_max_difference", "parity_weight_moved", "eval_images",
           "eval_loss_difference", "predict_difference", "decay_gradient_errors"),
    "05": ("plain_copy_spread", "synced_copy_spread", "plain_saved_vs_live", "parity_vs_one_device",
           "bn_routes", "sync_cost_ratio", "sync_cost_range"),
    "06": ("val_accuracy", "baseline_val_accuracy"),
    "07": ("val_accuracy", "resume_weight_difference"),
    "08": ("lr_rules", "strong_speedup", "strong_speedup_spread", "weak_speedup", "weak_speedup_spread"),
    "09": ("final_accuracy",),
    "10": ("val_accuracy", "resumed_at_step", "worker_digests_identical"),
    "11": ("ring_vs_add_n", "ring_bytes", "accumulation_parity", "batchnorm_accumulation",
           "precision_images_per_s", "bf16_val_accuracy", "baseline_val_accuracy", "xla_images_per_s"),
    "12": ("dataparallel_val_accuracy", "allreduce_vs_one_device", "allreduce_ops", "route_vs_tf_one_device",
           "bn_moving_mean_dp_vs_one_device", "bn_moving_mean_slice_vs_one_device"),
}  # fmt: skip


def _records(summary: dict[str, Any]) -> Records:
    return {entry["notebook"][:2]: entry.get("records", {}) for entry in summary["notebooks"]}


def _gap(value: float, reference: float) -> str:
    return f"{value:.3f} ({value - reference:+.3f})"


def _accuracy(r: Records) -> str:
    baseline = r["02"]["test_accuracy"]
    keys = {
        "03": "mirrored_val_accuracy",
        "04": "towers_val_accuracy",
        "07": "val_accuracy",
        "10": "val_accuracy",
    }
    beside = [f"{nb} {_gap(r[nb][key], baseline)}" for nb, key in keys.items() if key in r.get(nb, {})]
    text = (
        "**Accuracy** (test accuracy; chance is 0.10). The one-device baseline (02) reaches "
        f"{baseline:.3f}; beside it, with the gap: {', '.join(beside)}."
    )
    if "06" in r:
        text += (
            f" 06 trains on augmented batches against its own one-device run on the same stream: "
            f"{_gap(r['06']['val_accuracy'][-1], r['06']['baseline_val_accuracy'])}."
        )
    if "08" in r:
        rules = {k: v for k, v in r["08"]["lr_rules"].items() if not k.startswith("1 device")}
        text += (
            " 08's large global batch: "
            + "; ".join(f"{k} {_gap(v, baseline)}" for k, v in rules.items())
            + "."
        )
    if "09" in r:
        final = r["09"]["final_accuracy"].values()
        text += f" 09 (LeNet on MNIST): {min(final):.3f}–{max(final):.3f} over its averaging variants."
    if "12" in r:
        text += f" 12 (JAX `DataParallel`): {_gap(r['12']['dataparallel_val_accuracy'], baseline)}."
    return text


def _parity(r: Records) -> str:
    parts = []
    if "03" in r:
        parts.append(
            f"the hand-made all-reduce of 03 equals the one-device gradient to "
            f"{r['03']['allreduce_vs_one_device']:.1e}, and the classic mistake is off by a "
            "factor of "
            f"{r['03']['mistake_factor']:.4f} (*N* = {len(r['03']['slice_sizes'])})"
        )
    if "04" in r:
        towers = r["04"]["parity_max_difference"]
        parts.append(
            f"after 04's parity steps, towers and `MirroredStrategy` differ from one device by "
            f"{towers['towers']:.1e} and {towers['mirrored']:.1e}, while training moved the weights "
            f"by {r['04']['parity_weight_moved']:.1e}"
        )
    if not parts:
        return ""
    text = "; ".join(parts)
    return f"**Parity.** {text[0].upper()}{text[1:]} (float32 rounding)."


def _evaluation(r: Records) -> str:
    if "04" not in r:
        return ""
    four, decay = r["04"], r["04"]["decay_gradient_errors"]
    return (
        f"**Evaluation and weight decay (04, section 7).** On {four['eval_images']} test images whose "
        "last batch splits unevenly, `evaluate` under the strategy differs from one device by "
        f"{four['eval_loss_difference']:.1e} in the loss and `predict` by "
        f"{four['predict_difference']:.1e}; with `tf.nn.scale_regularization_loss` the all-reduced "
        f"gradient matches one device to {decay['scaled']:.1e} (relative), the penalty added unscaled "
        f"is off by {decay['unscaled_excess']:.4f} × its gradient (*N* − 1), and plain BatchNorm by "
        f"{decay['plain_bn']:.1e}."
    )


def _batchnorm(r: Records) -> str:
    if "05" not in r:
        return ""
    five = r["05"]
    text = (
        "**BatchNorm (05).** Plain BatchNorm's replica copies end "
        f"{five['plain_copy_spread']:.1e} apart, synchronized ones {five['synced_copy_spread']:.1e}; the "
        f"saved plain model predicts {five['plain_saved_vs_live']:.1e} away from the live one. After the "
        f"parity steps, synchronized BatchNorm is {five['parity_vs_one_device']['synchronized']:.1e} from "
        f"one device, plain {five['parity_vs_one_device']['plain']:.1e}."
    )
    routes = five.get("bn_routes", {})
    jax = next((v for k, v in routes.items() if k.startswith("JAX")), None)
    if jax is not None:
        text += f" JAX's `DataParallel` with plain BatchNorm lands {jax:.1e} from one TF device's statistics."
    if "sync_cost_range" in five:
        low, high = five["sync_cost_range"]
        verdict = ("a cost, beyond the spread" if low > 1 else "less time, beyond the spread" if high < 1
                   else "no difference beyond the spread")  # fmt: skip
        text += (f" A synchronized epoch took ×{five['sync_cost_ratio']:.2f} a plain one's time ({low:.2f}–"
                 f"{high:.2f} over its repeats): {verdict}.")
    return text


def _resume(r: Records) -> str:
    parts = []
    if "07" in r:
        parts.append(
            f"07's run killed mid-epoch and resumed ends {r['07']['resume_weight_difference']} from the "
            f"uninterrupted one"
        )
    if "10" in r:
        same = "identical" if r["10"]["worker_digests_identical"] else "NOT identical"
        parts.append(
            f"10's killed worker resumed at step {r['10']['resumed_at_step']}, its workers' weights {same}"
        )
    return "**Resume.** " + "; ".join(parts) + "." if parts else ""


def _spread(low: float, high: float) -> str:
    return f"{ratio_figure(low)}–{ratio_figure(high)}"  # a bound of 0.9995 is not "1.00"


def _speed(r: Records) -> str:
    if "08" not in r:
        return ""
    eight = r["08"]
    strong, weak = eight["strong_speedup_spread"], eight["weak_speedup_spread"]
    counts = [n for n in eight["strong_speedup"] if n != "1"]
    strong_text = ", ".join(
        f"{n} devices {eight['strong_speedup'][n]:.2f} ({_spread(*strong[n])})" for n in counts
    )
    weak_text = ", ".join(
        f"{n} devices {eight['weak_speedup'][n]:.2f} ({_spread(*weak[n])})" for n in weak if n != "1"
    )
    text = (
        "**Speed (08).** Strong scaling (the same global batch), speed-up over one logical device: "
        f"{strong_text}; weak scaling (the same batch per device): {weak_text}. A speed-up counts only "
        "where its range leaves out 1."
    )
    if "strong_cores_used" in eight and "op_cores" in eight:
        busy = ", ".join(f"{n} device(s) {c:.2f}" for n, c in eight["strong_cores_used"].items())
        top = max(counts, key=int)
        low, high = strong[top]
        if low > 1:
            cores = eight["strong_cores_used"]
            why = why_faster(eight["strong_speedup"][top], low, cores.get("1"), cores.get(top),
                             where="the cores figure")
            reading = f"On {top} devices, a speed-up: {why}"
        elif high < 1:
            reading = f"On {top} devices, a slowdown: {why_slower('the lesson')}"
        else:
            reading = "No difference beyond the spread."
        text += (f" Why (section 4): cores kept busy while training, {busy}; one convolution alone keeps "
                 f"{eight['op_cores']:.2f} busy. {reading}")
    return text


def _cost(r: Records) -> str:
    if "11" not in r:
        return ""
    eleven = r["11"]
    ring = eleven["ring_bytes"]
    sends = " / ".join(f"{ring[n]['ring_per_device'] / 1e6:.2f}" for n in sorted(ring, key=int))
    gathers = " / ".join(f"{ring[n]['gather_on_one'] / 1e6:.2f}" for n in sorted(ring, key=int))
    rates = eleven["precision_images_per_s"]
    xla = eleven["xla_images_per_s"]
    counts = " / ".join(sorted(ring, key=int))
    accumulation = eleven["accumulation_parity"]
    precision, xla_range = eleven.get("precision_ratio_range"), eleven.get("xla_ratio_range")
    ranges = (f" (bfloat16's ratio over its repeats {precision[0]:.2f}–{precision[1]:.2f}, XLA's "
              f"{xla_range[0]:.2f}–{xla_range[1]:.2f}; the CPU's bfloat16 instructions: "
              f"{', '.join(eleven.get('cpu_bf16_instructions', [])) or 'none found'})"
              if precision and xla_range else "")  # fmt: skip
    return (
        f"**Cost (11).** The ring equals `tf.add_n` to {eleven['ring_vs_add_n']:.1e}; each device sends "
        f"{sends} MB for *N* = {counts}, against {gathers} MB gathered on one device. Accumulation "
        f"against one large step: {accumulation['float64']:.1e} in float64, {accumulation['float32']:.1e} "
        f"in float32, and {eleven['batchnorm_accumulation']['relative']:.1%} of the gradient's norm with "
        f"BatchNorm. `mixed_bfloat16` trained at {rates['mixed_bfloat16']:,.0f} images/s against "
        f"float32's {rates['float32']:,.0f} (×{rates['mixed_bfloat16'] / rates['float32']:.2f}), to a test "
        f"accuracy of {eleven['bf16_val_accuracy']:.3f} against {eleven['baseline_val_accuracy']:.3f}; XLA "
        f"ran at ×{xla['jit_compile=True'] / xla['default']:.2f} the default step{ranges}."
    )


def _jax(r: Records) -> str:
    if "12" not in r:
        return ""
    twelve = r["12"]
    routes = twelve["route_vs_tf_one_device"]
    return (
        "**Keras on JAX (12).** The by-hand `psum` equals the one-device gradient to "
        f"{twelve['allreduce_vs_one_device']:.1e} and XLA compiles {twelve['allreduce_ops']} all-reduce; "
        f"one SGD step differs from TF's one device by at most {max(routes.values()):.1e} on the four "
        "routes; BatchNorm's moving mean under `DataParallel` is "
        f"{twelve['bn_moving_mean_dp_vs_one_device']:.1e} from one device's, one device's slice alone "
        f"{twelve['bn_moving_mean_slice_vs_one_device']:.2f}." + _jax_speed(twelve)
    )


def _jax_speed(twelve: dict[str, Any]) -> str:
    """Section 7's figures, where the run recorded them."""
    if "speed" not in twelve or "layer_ms" not in twelve:
        return ""
    speed, layers = twelve["speed"], twelve["layer_ms"]
    tf_ms = {name: ms for name, (ms, _) in layers["tensorflow"].items()}
    ratios = ", ".join(f"{name} ×{ms / tf_ms[name]:.2f}" for name, (ms, _) in layers["jax"].items())
    return (
        f" Speed (section 7): the compiling epoch took {twelve['compile_epoch_seconds']:.0f} s; DataParallel "
        f"trained at {speed['jax_dataparallel']:,.0f} images/s against TensorFlow's one device at "
        f"{speed['tf_one_device']:,.0f}; each convolution, JAX's time over TensorFlow's: {ratios}."
    )


TOPICS: tuple[Callable[[Records], str], ...] = (
    _accuracy,
    _parity,
    _evaluation,
    _batchnorm,
    _jax,
    _resume,
    _speed,
    _cost,
)


def learners_block(summary: dict[str, Any], run_line: str) -> str:
    """The guide's block: the run it comes from, then one bullet per topic the run holds."""
    records = _records(summary)
    if "02" not in records:
        raise ValueError(
            "the run holds no lesson 02 (the baseline every accuracy is set against): use `make run`."
        )
    bullets = [text for topic in TOPICS if (text := topic(records))]
    return f"Measured by {run_line}.\n\n" + "\n".join(f"- {bullet}" for bullet in bullets)
