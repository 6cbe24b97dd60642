"""The run folder's ``index.html``: one row per lesson, for a teacher; self-contained, every value escaped."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote

from mgtutor.classroom.run_chart import baseline_of, facts, figure_html

# A lesson's status in summary.json and on the page.
OK, FAILED, RUNNING, NOT_RUN = "ok", "failed", "running", "not run"


def estimated_for(report: dict[str, Any]) -> str:
    """What a run's estimate (from make check's reference step) was made for: the defaults, or its preset."""
    preset = report.get("preset")
    return f"with the {preset} preset" if preset else "at classroom defaults"


def duration(seconds: float) -> str:
    """12.3 s, or 4 min 05 s."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


_STYLE = """
.preflight li.ok b { color: #2a7a2a; } .preflight li.warn b { color: #a06000; }
.preflight li.fail { color: #b00020; }
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
.machine, .command { color: #444; margin: 0.2em 0; }
code { background: #f3f3f3; padding: 0 0.2em; }
table { border-collapse: collapse; margin-top: 1em; width: 100%; table-layout: fixed; }
td, th { overflow-wrap: anywhere; }
col.name { width: 17em; } col.status { width: 5em; } col.num { width: 6.5em; } col.params { width: 13em; }
.glance { display: flex; flex-wrap: wrap; gap: 1.5em; } .glance svg { max-width: 100%; height: auto; }
details summary { cursor: pointer; color: #333; }
th, td { border: 1px solid #ccc; padding: 0.35em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; white-space: nowrap; }
ul { margin: 0; padding-left: 1.1em; }
.status { font-weight: bold; white-space: nowrap; }
.ok { color: #17692c; } .failed { color: #b00020; } .running { color: #8a5a00; } .not-run { color: #777; }
.override { background: #fff2a8; font-weight: bold; }
.default { color: #777; font-weight: normal; }
.error { color: #b00020; white-space: pre-wrap; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _link(name: str, label: str) -> str:
    return f'<a href="{_e(quote(name))}">{_e(label)}</a>'


def _shown(value: Any) -> str:
    """A parameter's value as typed, or, for a long list, its first item and how many there are."""
    text = repr(value)
    if len(text) <= 60 or not isinstance(value, list | tuple) or not value:
        return text
    return f"[{value[0]!r}, ... {len(value)} values]"


def _parameters_cell(entry: dict[str, Any]) -> str:
    """Overrides in full; the defaults folded away, so a long list never widens the page."""
    overrides, defaults = [], []
    for name, default in entry["defaults"].items():
        if name in entry["parameters"]:
            value = entry["parameters"][name]
            overrides.append(
                f'<li class="override" title="overridden; default {_e(repr(default))}">{_e(name)} = '
                f'{_e(_shown(value))} <span class="default">(default {_e(_shown(default))})</span></li>'
            )
        else:
            defaults.append(f"<li>{_e(name)} = {_e(_shown(default))}</li>")
    folded = f"{len(defaults)} {'more ' if overrides else ''}at their defaults" if defaults else ""
    shown = f"<ul>{''.join(overrides)}</ul>" if overrides else ""
    if not folded:
        return shown
    return f"{shown}<details><summary>{folded}</summary><ul>{''.join(defaults)}</ul></details>"


def _metrics_cell(entry: dict[str, Any], baseline: float | None) -> str:
    said = "".join(f"<li>{_e(sentence)}</li>" for sentence in facts(entry, baseline))
    error = f'<div class="error">{_e(entry["error"])}</div>' if entry.get("error") else ""
    return error + (f"<ul>{said}</ul>" if said else "")


def _row(entry: dict[str, Any], baseline: float | None) -> str:
    links = [_link(entry[kind], kind) for kind in ("html", "ipynb") if kind in entry]
    stem = entry["notebook"].removesuffix(".ipynb")
    name = _link(entry["html"], stem) if "html" in entry else _e(stem)
    seconds = duration(entry["seconds"]) if "seconds" in entry else ""
    status = entry["status"]
    return (
        f'<tr id="{_e(entry["notebook"])}"><td>{name}<br><small>{" · ".join(links)}</small></td>'
        f'<td class="status {status.replace(" ", "-")}">{_e(status)}</td>'
        f'<td>{_parameters_cell(entry)}</td><td class="num">{_e(seconds)}</td>'
        + "".join(f'<td class="num">{_e(entry.get(key, ""))}</td>' for key in ("peak_rss_mb", "end_rss_mb"))
        + f"<td>{_metrics_cell(entry, baseline)}</td></tr>"
    )


def index_html(report: dict[str, Any]) -> str:
    """The run's report page: self-contained (inline CSS, no scripts), every value escaped."""
    from mgtutor.classroom.preflight import checklist_html

    machine = report["machine"]
    devices = [  # their kind; how many is each lesson's own (lesson 00's count misled as the run's)
        f"{e['records'].get('device_kind', '?')} devices"
        for e in report["notebooks"]
        if "n_devices" in e.get("records", {})
    ][:1]
    machine_text = ", ".join(
        [f"{machine['hostname']}", f"{machine['cpu_count']} cores", f"TensorFlow {machine['tensorflow']}",
         f"Keras {machine['keras']}", f"Python {machine['python']}", *devices]
    )  # fmt: skip
    overrides = ", ".join(f"{k} = {v!r}" for k, v in report["overrides"].items())
    overrides = overrides or "none (the series' classroom defaults)"
    counts = {s: sum(e["status"] == s for e in report["notebooks"]) for s in (OK, FAILED, NOT_RUN)}
    baseline = baseline_of(report["notebooks"])
    rows = "\n".join(_row(entry, baseline) for entry in report["notebooks"])
    started = report["started"].replace("T", " ")
    estimated = (f" (estimated {duration(report['estimate_seconds'])} {estimated_for(report)})"
                 if "estimate_seconds" in report else "")  # fmt: skip
    preset = f" · preset {report['preset']}" if report.get("preset") else ""
    sized = f'<p class="machine">{_e(report["sizing"]["said"])}</p>\n' if "sizing" in report else ""
    if "reference_end" in report:
        sized += f'<p class="machine">{_e(report["reference_end"]["said"])}</p>\n'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mgtutor run {_e(report["started"])}: {_e(report["status"])}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>mgtutor series run — <span class="status {_e(report["status"])}">{_e(report["status"])}</span></h1>
<p class="machine">Started {_e(started)} · total {_e(duration(report["seconds"]))}{estimated}{_e(preset)}
 · {counts[OK]} ok, {counts[FAILED]} failed, {counts[NOT_RUN]} not run</p>
<p class="machine">Machine: {_e(machine_text)}</p>
<p class="command">Command: <code>{_e(report["command"])}</code></p>
<p class="command">Command-line overrides: <code>{_e(overrides)}</code></p>
{sized}{checklist_html(report.get("preflight", []))}{figure_html(report["notebooks"])}<table>
<colgroup><col class="name"><col class="status"><col class="params"><col class="num"><col class="num">
<col class="num"><col></colgroup>
<thead><tr><th>notebook</th><th>status</th><th>parameters (highlighted: not the lesson's own default)</th>
<th>duration</th><th>peak MB</th><th>kernel MB at end</th>
<th>what to check (every record: summary.json)</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
<p class="machine">Machine-readable: {_link("summary.json", "summary.json")}</p>
</body>
</html>
"""


