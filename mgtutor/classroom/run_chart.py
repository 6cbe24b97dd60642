"""The run report's picture and short facts: what a teacher checks at a glance, from summary.json's records.

Two panels drawn as inline SVG (no scripts, no files): each lesson's time against its share of the
15-minute slot, and each accuracy against the learning floor and the one-device baseline. Beside each
lesson, at most three short sentences; every raw record stays in summary.json.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mgtutor.classroom.estimate import share_of_slot

CHANCE = 0.1  # ten balanced classes
# Below this a model has not learnt: the notebook tests' floor at tiny sizes, and the report's line.
LEARNING_FLOOR = CHANCE + 0.02
# Records that hold a lesson's accuracy on CIFAR-10's test images, in the order they are looked for.
_ACCURACY_KEYS = ("test_accuracy", "val_accuracy", "mirrored_val_accuracy", "towers_val_accuracy",
                  "dataparallel_val_accuracy", "bf16_val_accuracy")  # fmt: skip
# 16 trains on the whole data set with its own recipe: drawn, but not set against the baseline.
_NOT_COMPARABLE = {"16"}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def accuracy_of(records: Mapping[str, Any], lesson: str) -> float | None:
    """The lesson's test accuracy on CIFAR-10, or None where it trains nothing comparable."""
    if lesson == "16" and isinstance(records.get("accuracy"), Mapping):
        return _number(records["accuracy"].get("fit"))
    for key in _ACCURACY_KEYS:
        value = records.get(key)
        if isinstance(value, list) and value:  # a curve per epoch: where it ended
            value = value[-1]
        if _number(value) is not None:
            return _number(value)
    return None


def baseline_of(entries: Sequence[Mapping[str, Any]]) -> float | None:
    """Lesson 02's one-device accuracy, which every later lesson compares with."""
    for entry in entries:
        if entry["notebook"].startswith("02"):
            return _number((entry.get("records") or {}).get("test_accuracy"))
    return None


def own_baseline(records: Mapping[str, Any], baseline: float | None) -> float | None:
    """The one-device accuracy a lesson is set against: its own float32 run where it trains one, else 02's."""
    own = _number(records.get("baseline_val_accuracy"))
    return own if own is not None else baseline


def _all(values: Any) -> bool:
    return all(values.values() if isinstance(values, Mapping) else values)


# Per lesson, the checks a teacher reads first, each a sentence made from records (skipped where a
# record is missing, as in an older run). The accuracy comes separately, set against its baseline.
_CHECKS: dict[str, tuple[Any, ...]] = {
    "00": (lambda r: f"{r['n_devices']} {r['device_kind']} devices; "
                     f"each ran its op: {_all(r['placement_ok'])}.",),
    "01": (lambda r: f"{r['train_shape'][0]:,} training and {r['test_shape'][0]:,} test images; "
                     f"global batch {r['global_batch']}.",),
    "03": (lambda r: f"Hand-made all-reduce against one device: {r['allreduce_vs_one_device']:.1e}.",
           lambda r: f"Not dividing by the global batch: updates {r['mistake_factor']:.4f}x too big."),
    "04": (lambda r: f"Towers by hand against multi_gpu_model: {r['wrapper_vs_by_hand']:.1e}.",),
    "05": (lambda r: f"BatchNorm copies apart: plain {r['plain_copy_spread']:.1e}, "
                     f"synchronized {r['synced_copy_spread']:.1e}.",),
    "07": (lambda r: f"Killed and resumed against never killed: {r['resume_weight_difference']:.1e}.",),
    "08": (lambda r: f"2 devices: strong scaling {r['strong_speedup']['2']:.2f}x, "
                     f"weak {r['weak_speedup']['2']:.2f}x (the lesson reads them with their spread).",),
    "09": (lambda r: "Averaging every step against the all-reduce: "
                     f"{max(r['averaging_vs_allreduce'].values()):.1e}.",
           lambda r: f"MNIST accuracy {min(r['final_accuracy'].values()):.3f}-"
                     f"{max(r['final_accuracy'].values()):.3f}."),
    "10": (lambda r: f"Workers' weights identical: {r['worker_digests_identical']}; "
                     f"restarted at step {r['resumed_at_step']}.",),
    "11": (lambda r: f"Ring all-reduce against add_n: {r['ring_vs_add_n']:.1e}.",),
    "12": (lambda r: f"JAX all-reduce against one device: {r['allreduce_vs_one_device']:.1e} "
                     f"(largest gradient {r['largest_gradient']:.1e}).",),
    "13": (lambda r: f"ZeRO-3 training against data parallelism: {r['fit_zero3_vs_dp']['difference']:.1e}, "
                     f"where the steps moved the weights {r['fit_zero3_vs_dp']['moved']:.1e}.",),
    "14": (lambda r: f"Every job's weights identical: {_all(r['digests_identical'])}.",),
    "15": (lambda r: f"The fixed hang trains identical weights: {r['fixed_hang']['identical']}.",),
    "16": (lambda r: f"{r['budget_used']['minutes']:.2f} min used, {r['budget_used']['training']:.2f} of "
                     f"them training; with flips and shifts {r['accuracy']['augmented']:.3f}.",),
    "17": (lambda r: f"Killed and resumed against never killed: {r['resume']['difference']:.1e}.",
           lambda r: f"Slurm's run against the local one: {r['slurm']['difference']:.1e}."),
    "18": (lambda r: f"GPipe's gradients against one device: {r['gradients_GPipe']['difference']:.1e}; "
                     f"1F1B's: {r['gradients_1F1B']['difference']:.1e} (largest gradient "
                     f"{r['gradients_GPipe']['largest']:.1e}).",),
}  # fmt: skip


def facts(entry: Mapping[str, Any], baseline: float | None) -> list[str]:
    """At most three short sentences a teacher checks for this lesson."""
    records, lesson = entry.get("records") or {}, entry["notebook"][:2]
    said = []
    if records.get("synthetic"):
        said.append("Trained on the synthetic stand-in: its accuracies say nothing about CIFAR-10.")
    accuracy = accuracy_of(records, lesson)
    if accuracy is not None:
        against = own_baseline(records, baseline)
        if lesson in _NOT_COMPARABLE or against is None:
            said.append(f"Test accuracy {accuracy:.3f}.")
        else:
            said.append(f"Test accuracy {accuracy:.3f}; its one-device baseline {against:.3f}.")
    for sentence in _CHECKS.get(lesson, ()):
        try:
            said.append(sentence(records))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            continue  # a record this run did not make
    return said[:3]


# --------------------------------------------------------------------------- the picture

_ROW, _LABEL, _WIDTH = 18, 34, 560  # pixels: one lesson's row, the label column, each panel's width


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">'
            f"<title>{html.escape(title)}</title>" + "".join(body) + "</svg>")  # fmt: skip


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 11, colour: str = "#222") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{colour}" '
            f'font-family="system-ui, sans-serif">{html.escape(text)}</text>')  # fmt: skip


def time_panel(entries: Sequence[Mapping[str, Any]]) -> str:
    """Each lesson's seconds as a bar, its share of the slot as a tick; a bar past its tick is orange."""
    timed = [e for e in entries if _number(e.get("seconds")) is not None]
    if not timed:
        return ""
    longest = max(max(e["seconds"], share_of_slot(e["notebook"][:2]) or 0) for e in timed)
    scale = (_WIDTH - _LABEL - 60) / max(longest, 1.0)
    body, top = [_text(0, 12, "seconds per lesson; | its share of the 15-minute slot", size=12)], 22
    for row, entry in enumerate(timed):
        y, lesson = top + row * _ROW, entry["notebook"][:2]
        share, seconds = share_of_slot(lesson), entry["seconds"]
        over = share is not None and seconds > share
        body.append(_text(0, y + 12, lesson))
        body.append(f'<rect x="{_LABEL}" y="{y + 3}" width="{seconds * scale:.1f}" height="11" '
                    f'fill="{"#e08a00" if over else "#4a7fb5"}"/>')  # fmt: skip
        if share is not None:
            x = _LABEL + share * scale
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y + 1}" y2="{y + 16}" stroke="#222" '
                        'stroke-width="2"/>')  # fmt: skip
        body.append(_text(_LABEL + seconds * scale + 4, y + 12, f"{seconds:.0f} s", size=10))
    title = "Each lesson's seconds against its share of the slot"
    return _svg(_WIDTH, top + len(timed) * _ROW + 4, body, title)


def accuracy_panel(entries: Sequence[Mapping[str, Any]]) -> str:
    """Each accuracy as a dot on 0-1, beside the learning floor (dashed) and its own baseline (a tick): the
    lesson's `baseline_val_accuracy` where it trains one, else lesson 02's, as `facts` says."""
    points = [(e["notebook"][:2], accuracy_of(e.get("records") or {}, e["notebook"][:2])) for e in entries]
    points = [(lesson, value) for lesson, value in points if value is not None]
    if not points:
        return ""
    baseline, scale, top = baseline_of(entries), _WIDTH - _LABEL - 60, 22
    against = {e["notebook"][:2]: own_baseline(e.get("records") or {}, baseline) for e in entries}
    height = top + len(points) * _ROW + 16
    body = [_text(0, 12, f"test accuracy; dashed: learning floor (chance + {LEARNING_FLOOR - CHANCE:.2f}); "
                         "|: the lesson's one-device baseline", size=12)]  # fmt: skip
    x = _LABEL + LEARNING_FLOOR * scale
    body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{height - 14}" stroke="#888" '
                'stroke-dasharray="4 3"/>')  # fmt: skip
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(_text(_LABEL + tick * scale, height - 2, f"{tick:g}", "middle", 10, "#555"))
    for row, (lesson, value) in enumerate(points):
        y = top + row * _ROW
        low = value <= LEARNING_FLOOR
        body.append(_text(0, y + 12, lesson))
        own = against[lesson]
        if own is not None and lesson not in _NOT_COMPARABLE:
            body.append(f'<line x1="{_LABEL + own * scale:.1f}" x2="{_LABEL + own * scale:.1f}" y1="{y + 1}" '
                        f'y2="{y + 15}" stroke="#444" stroke-width="2"/>')  # fmt: skip
        body.append(f'<circle cx="{_LABEL + value * scale:.1f}" cy="{y + 8}" r="5" '
                    f'fill="{"#b00020" if low else "#17692c"}"/>')  # fmt: skip
        note = " (whole data set, own recipe)" if lesson in _NOT_COMPARABLE else ""
        body.append(_text(_LABEL + value * scale + 9, y + 12, f"{value:.3f}{note}", size=10))
    return _svg(_WIDTH, height, body, "Each lesson's test accuracy against the floor and the baseline")


def figure_html(entries: Sequence[Mapping[str, Any]]) -> str:
    """Both panels side by side (they wrap below 1,200 pixels), or nothing before any lesson ran."""
    panels = [panel for panel in (time_panel(entries), accuracy_panel(entries)) if panel]
    if not panels:
        return ""
    divs = "".join(f"<div>{panel}</div>" for panel in panels)
    return f'<h2>At a glance</h2>\n<div class="glance">{divs}</div>\n'
