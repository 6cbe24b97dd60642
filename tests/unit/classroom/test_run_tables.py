"""mgtutor.classroom.run_tables: the committed result tables parse, agree with what the notebook checks
assert, and are what the command writes from a run's summary.json; a run writes its own CPU kind's
column of docs/results.md and leaves the other CPUs' columns as they were."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mgtutor.classroom import results_page as page
from mgtutor.classroom.learner_figures import READS, learners_block
from mgtutor.classroom.lessons import find_notebooks
from mgtutor.classroom.run_tables import RESULTS, TARGETS, block, main, parse_table, replace_block
from tests.conftest import ROOT
from tests.notebooks.test_notebooks import CHANCE, TINY_GAP

NOTEBOOKS = [nb.name[:2] for nb in find_notebooks(ROOT / "notebooks")]
# Lessons that land after every run the committed tables come from go in this set until a full `make run`
# (then run_tables) gives them their row (17's first run filled its row, on an Intel Xeon with AMX; the
# other columns say "not run" there until their CPU's next run; 18's first run did the same).
NEWER_THAN_THE_TABLES: set[str] = set()
TABLED = [nb for nb in NOTEBOOKS if nb not in NEWER_THAN_THE_TABLES]
# The notebooks that train something to set beside 02's baseline (the accuracy table's rows): 11 trains its
# bfloat16 recipe on a subset only, 13 an MLP for parity, 14 reports minutes to an accuracy (its own
# table), 15 trains drills, 17 trains 20 steps to compare its runs, 18 steps an MLP for its gradients.
TRAINS_NOTHING_TO_COMPARE = {"00", "01", "05", "11", "13", "14", "15", "17", "18"}


def committed(name: str, target: int = 0) -> str:
    return block((ROOT / TARGETS[name][target]).read_text(encoding="utf-8"), name)


def numbers(cell: str) -> list[float]:
    return [float(v) for v in re.findall(r"\d+\.\d+", cell)]


def ran(name: str) -> dict[str, dict[str, str]]:
    """The committed block's columns that hold a run, by CPU kind; each run line names a CPU of its kind."""
    first, columns, lines = page.read_columns(committed(name))
    assert list(columns)[: len(page.KINDS)] == list(page.KINDS), "the five kinds, in order, first"
    held = {kind: column for kind, column in columns.items() if lines[kind] != page.NOT_RUN}
    for kind in held:
        line = lines[kind]
        assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line) and "TensorFlow 2.21" in line
        model, flags = re.search(r"cores, (.+?) \(([^)]*)\), ", line).groups()
        features = [f for f in flags.split(";")[0].split(", ")]
        assert page.cpu_kind({"cpu": {"model": model, "features": features}}) == kind, line
    for kind in set(columns) - set(held):
        assert set(columns[kind].values()) == {page.NOT_RUN}, f"{name}: {kind} has no run but has figures"
    return held


def test_the_series_columns_parse_and_agree_with_the_notebook_checks():
    seconds, accuracy = ran("series-by-cpu"), ran("accuracy-by-cpu")
    assert seconds.keys() == accuracy.keys() and len(seconds) >= 3
    first, columns, _ = page.read_columns(committed("series-by-cpu"))
    assert list(next(iter(columns.values()))) == [*TABLED, "all", "goal (15 min)"]
    for kind, column in seconds.items():
        run = [nb for nb in TABLED if column[nb] != page.NOT_RUN]
        assert run[0] == "00" and all(int(column[nb]) > 0 for nb in run), kind
        assert re.fullmatch(rf"(\d+ min )?\d+ s \({len(run)} notebooks\)", column["all"]), kind
        assert column["goal (15 min)"] in ("within", "over")
    for kind, column in accuracy.items():
        assert list(column) == [nb for nb in TABLED if nb not in TRAINS_NOTHING_TO_COMPARE]
        baseline = float(column["02"])
        assert CHANCE + 0.02 < baseline <= 1  # learnt(): above chance on the real data
        for notebook, cell in column.items():
            if notebook == "09":  # MNIST: the checks ask for more than 0.5 of every variant
                assert all(0.5 < v <= 1 for v in numbers(cell)) and len(numbers(cell)) == 2
            elif notebook == "16":  # the capstone: its own recipe, at the series' budget, on another data set
                assert len(numbers(cell)) == 1 and CHANCE + 0.02 < numbers(cell)[0] <= 1
            else:  # CIFAR-10: above chance, and within the gap the checks allow of the one-device baseline
                assert numbers(cell) and all(CHANCE + 0.02 < v <= 1 for v in numbers(cell)), (kind, notebook)
                assert all(abs(v - baseline) <= TINY_GAP for v in numbers(cell)), (kind, notebook, cell)


def test_teachers_memory_parses_and_its_sentences_match_its_table():
    text = committed("memory")
    assert re.search(r"one `make run` started \d{4}-\d\d-\d\d", text)
    table = parse_table(text)
    # the guide's run, the teacher's own, may predate the newest lesson
    assert table["notebook"] == NOTEBOOKS[: len(table["notebook"])] and "16" in table["notebook"]
    peaks = [int(v) for v in table["peak MB"]]
    ends = [int(v) for v in table["kernel left open afterwards, MB"]]
    assert all(p >= e > 0 for p, e in zip(peaks, ends, strict=True))
    largest = re.search(r"largest peak is (\d+\.\d\d) GB \(notebook (\d\d)\)", text)
    assert float(largest.group(1)) == pytest.approx(max(peaks) / 1000, abs=0.005)
    assert largest.group(2) == table["notebook"][peaks.index(max(peaks))]
    kept = re.search(r"left open keeps up to (\d+\.\d\d) GB", text)
    assert float(kept.group(1)) == pytest.approx(max(ends) / 1000, abs=0.005)
    both = re.search(r"plus the largest notebook needs (\d+\.\d\d) GB", text)
    assert float(both.group(1)) == pytest.approx((max(peaks) + max(ends)) / 1000, abs=0.01)


@pytest.mark.parametrize("name", ["capstone-by-cpu", "capstone-long-by-cpu"])
def test_the_capstone_columns_parse_and_state_their_runs(name):
    held = ran(name)
    assert held
    for kind, column in held.items():
        budgets = {label: cell for label, cell in column.items() if label.startswith("by ")}
        assert list(budgets) == ["by 5 min", "by 10 min", "by 20 min", "by 30 min"]
        reached = [numbers(cell)[0] for cell in budgets.values() if cell != "—"]
        assert reached and all(CHANCE + 0.02 < v <= 1 for v in reached), kind
        assert column["data"].startswith("50,000 / 10,000")
        assert re.fullmatch(r"(float32|mixed_bfloat16), XLA (on|off)", column["arithmetic picked"])


DOCUMENTS = sorted({relative for targets in TARGETS.values() for relative in targets})
EPYC = {"model": "AMD EPYC", "features": ["avx2", "avx512f", "avx512_bf16"]}


def copy_documents(root: Path) -> None:
    """The committed docs/results.md and teacher's guide under `root`, for the command to rewrite."""
    (root / "docs").mkdir()
    for relative in DOCUMENTS:
        shutil.copy(ROOT / relative, root / relative)


def columns(root: Path, name: str) -> dict[str, dict[str, str]]:
    return page.read_columns(block((root / RESULTS).read_text(encoding="utf-8"), name))[1]


def _capstone_summary(minutes, sides=None, cpu=EPYC) -> dict:
    ends = (4.3, 8.4, 12.5, 16.6, 20.7)
    curve = [{"epoch": i + 1, "minutes": m, "accuracy": 0.5 + 0.05 * i} for i, m in enumerate(ends)]
    return {
        "started": "2026-11-26T06:40:00", "status": "complete", "overrides": {}, "seconds": 1300.0,
        "machine": {"hostname": "vm", "cpu_count": 2, "platform": "Linux", "python": "3.11.7",
                    "tensorflow": "2.21.0", "keras": "3.15.1", "cpu": cpu},
        "notebooks": [{"notebook": "16_capstone.ipynb", "seconds": 1290.0, "peak_rss_mb": 3000,
                       "end_rss_mb": 900, "parameters": {"MINUTES": minutes},
                       "records": {"data": {"train": 50000, "test": 10000, "copy": "a JPEG-once copy: close"},
                                   "curve": curve,
                                   "accuracy": {"reloaded": 0.7, "flips": 0.71, "augmented": 0.72},
                                   **({"sides": sides} if sides else {})}}],
    }  # fmt: skip


def test_each_cpu_kind_has_its_column_named_by_model_and_flags():
    def kind(model, *features):
        return page.cpu_kind({"cpu": {"model": model, "features": ["avx2", *features]}})

    assert kind("AMD EPYC 9R14", "avx512f", "avx512_bf16") == page.KINDS[0]
    assert kind("Intel(R) Xeon(R) Processor", "avx512f", "avx512_bf16", "avx512_fp16") == page.KINDS[1]
    assert kind("Intel(R) Xeon(R) Processor", "avx512f", "avx512_vnni") == page.KINDS[2]
    assert kind("AMD EPYC 7B12") == page.KINDS[3]
    assert kind("Intel(R) Xeon(R) CPU", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") == page.KINDS[4]
    assert kind("Apple M2") == "Apple M2, AVX2 only" and page.cpu_kind({}) == "CPU not recorded"


def test_a_make_capstone_run_writes_its_own_cpus_column_and_leaves_the_others(tmp_path, capsys):
    copy_documents(tmp_path)
    before = columns(tmp_path, "capstone-by-cpu")
    path = tmp_path / "summary.json"
    summary = _capstone_summary(None, sides=[24, 24, 32, 32, 32])
    summary["notebooks"][0]["records"]["minutes_per_epoch"] = {"32": 3.712, "24": 2.371}
    path.write_text(json.dumps(summary))
    main([str(path), "--root", str(tmp_path)])
    assert block((tmp_path / RESULTS).read_text(), "series-by-cpu") == committed("series-by-cpu")
    after = columns(tmp_path, "capstone-by-cpu")
    assert {k: v for k, v in after.items() if k != page.KINDS[0]} == {
        k: v for k, v in before.items() if k != page.KINDS[0]}  # fmt: skip
    mine = after[page.KINDS[0]]
    # by 5 min: epoch 1 (4.3); by 10: epoch 2 (8.4); by 20: epoch 4 (16.6); by 30: the last, epoch 5 (20.7)
    assert [mine[f"by {m} min"] for m in (5, 10, 20, 30)] == [
        "0.500 (epoch 1)", "0.550 (epoch 2)", "0.650 (epoch 4)", "0.700 (epoch 5)"]  # fmt: skip
    assert mine["epochs"] == "5 (2 at 24x24, 3 at 32x32)" and mine["last epoch ended"] == "20.7 min, 0.700"
    assert mine["minutes per epoch at 24x24"] == "2.37" and mine["with flips and shifts"] == "0.7200"
    assert mine["arithmetic picked"] == page.NOT_RUN  # a row this run did not record
    text = block((tmp_path / RESULTS).read_text(), "capstone-by-cpu")
    assert "- **AMD EPYC, avx512_bf16**: one `make capstone` started 2026-11-26 06:40:00 (classroom " in text
    path.write_text(json.dumps(_capstone_summary(2)))  # a budget of minutes: not the whole recipe
    with pytest.raises(SystemExit) as refused:
        main([str(path), "--root", str(tmp_path)])
    assert refused.value.code == 2 and "neither the series" in capsys.readouterr().err


def test_a_cpu_of_another_kind_gets_a_column_after_the_five(tmp_path):
    copy_documents(tmp_path)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_capstone_summary(None, cpu={"model": "Apple M2", "features": []})))
    main([str(path), "--root", str(tmp_path)])
    after = columns(tmp_path, "capstone-by-cpu")
    assert list(after) == [*page.KINDS, "Apple M2, no AVX2"] and after["Apple M2, no AVX2"]["by 30 min"]
    main([str(path), "--root", str(tmp_path)])  # the same run again: the same column, not a second one
    assert columns(tmp_path, "capstone-by-cpu") == after


def test_a_make_capstone_long_run_writes_its_block_with_the_arithmetic_and_the_time_left(tmp_path):
    copy_documents(tmp_path)
    summary = {**_capstone_summary(None, sides=[16, 24, 32, 32, 32]), "recipe": "capstone-long"}
    records = summary["notebooks"][0]["records"]
    rates = {"float32, XLA off": 500.0, "mixed_bfloat16, XLA off": 680.0}
    records["arithmetic"] = {"precision": "mixed_bfloat16", "xla": False, "rates": rates}
    records["time_left"] = {"epoch": 3, "said": 8.0, "took": 8.2, "epoch_minutes": {"3": 4.0}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    main([str(path), "--root", str(tmp_path)])
    text = (tmp_path / RESULTS).read_text()
    assert block(text, "capstone-by-cpu") == committed("capstone-by-cpu")  # make capstone's left as it was
    mine = columns(tmp_path, "capstone-long-by-cpu")[page.KINDS[0]]
    assert mine["arithmetic picked"] == "mixed_bfloat16, XLA off"
    assert mine["images/s timed at its start"] == "float32, XLA off 500; mixed_bfloat16, XLA off 680"
    assert mine["time left after the first full-size epoch: said / took"] == "8.0 / 8.2 min (epoch 3)"
    assert "one `make capstone-long` started 2026-11-26" in block(text, "capstone-long-by-cpu")


def test_print_shows_the_blocks_a_run_writes_and_rewrites_no_file(tmp_path, capsys):
    copy_documents(tmp_path)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_capstone_summary(None)))
    main([str(path), "--root", str(tmp_path), "--print"])
    out = capsys.readouterr().out
    assert out.startswith(f"capstone-by-cpu ({path}):\n\n") and "| 0.700 (epoch 5) |" in out
    for relative in DOCUMENTS:
        assert (tmp_path / relative).read_text() == (ROOT / relative).read_text()
    with pytest.raises(SystemExit) as refused:  # a block this run cannot write is refused, as without it
        main([str(path), "--print", "--blocks", "memory"])
    assert refused.value.code == 2 and "this run writes only capstone-by-cpu" in capsys.readouterr().err


# The records every lesson made in one `make run` at the classroom defaults (2026-11-27, the brief's AMD
# EPYC), kept to what the generated blocks read; the capstone's as a budgeted run records them.
RECORDS = json.loads((Path(__file__).parent / "make_run_records.json").read_text())
RECORDS["16_capstone.ipynb"] = {"accuracy": {"live": 0.33, "reloaded": 0.33, "flips": 0.34}}


def _series_summary(**changes) -> dict:
    return {
        "started": "2026-11-25T19:00:00", "status": "complete", "overrides": {}, "seconds": 400.0,
        "machine": {"hostname": "laptop", "cpu_count": 2, "platform": "Linux-x86_64", "python": "3.11.2",
                    "tensorflow": "2.21.0", "keras": "3.15.1",
                    "cpu": {"model": "AMD EPYC", "features": ["avx2", "avx512f", "avx512_bf16"]}},
        "notebooks": [{"notebook": nb.name, "seconds": 10.0 + i, "peak_rss_mb": 900 + i, "end_rss_mb": 600,
                       "records": RECORDS.get(nb.name, {})}
                      for i, nb in enumerate(find_notebooks(ROOT / "notebooks"))],
        **changes,
    }  # fmt: skip


def test_a_series_run_writes_its_columns_and_the_guide_and_refuses_a_partial_run(tmp_path, capsys):
    copy_documents(tmp_path)
    before = {name: columns(tmp_path, name) for name in ("series-by-cpu", "accuracy-by-cpu")}
    summary = _series_summary()
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    main([str(path), "--root", str(tmp_path)])
    seconds, accuracy = columns(tmp_path, "series-by-cpu"), columns(tmp_path, "accuracy-by-cpu")
    for name, after in (("series-by-cpu", seconds), ("accuracy-by-cpu", accuracy)):
        # the other CPUs' columns keep their cells; a lesson newer than the tables gains "not run" there
        assert {k: {nb: c for nb, c in v.items() if nb not in NEWER_THAN_THE_TABLES} for k, v in after.items()
                if k != page.KINDS[0]} == {k: v for k, v in before[name].items() if k != page.KINDS[0]}
    mine = seconds[page.KINDS[0]]
    assert mine["00"] == "10" and mine["goal (15 min)"] == "within"
    assert mine["all"] == f"6 min 40 s ({len(NOTEBOOKS)} notebooks)"
    assert accuracy[page.KINDS[0]]["08"] == "0.414 / 0.471" and accuracy[page.KINDS[0]]["09"] == "0.944–0.953"
    assert accuracy[page.KINDS[0]]["16"] == "0.330"  # the reloaded model's
    text = block((tmp_path / RESULTS).read_text(), "series-by-cpu")
    assert "2026-11-25 19:00:00 (classroom defaults) on laptop: 2 cores, AMD EPYC (avx2, avx512f" in text
    memory = block((tmp_path / "docs" / "teachers.md").read_text(), "memory")
    last, peak = NOTEBOOKS[-1], 900 + len(NOTEBOOKS) - 1  # 900 MB + its index: the largest peak
    assert f"largest peak is {peak / 1000:.2f} GB (notebook {last})" in memory
    assert f"needs {(peak + 600) / 1000:.2f} GB" in memory
    again = (tmp_path / RESULTS).read_text()
    main([str(path), "--root", str(tmp_path)])
    assert (tmp_path / RESULTS).read_text() == again  # the same run, the same text
    overridden = _series_summary(overrides={"EPOCHS": 1})
    overridden["notebooks"] = [e for e in overridden["notebooks"] if not e["notebook"].startswith("17")]
    path.write_text(json.dumps(overridden))
    main([str(path), "--root", str(tmp_path), "--blocks", "series-by-cpu"])
    mine = columns(tmp_path, "series-by-cpu")[page.KINDS[0]]
    assert mine["goal (15 min)"] == "not judged: overrides" and mine["17"] == page.NOT_RUN
    assert list(mine) == [*NOTEBOOKS, "all", "goal (15 min)"]  # a row the run lacks (17) keeps its place
    path.write_text(json.dumps({**summary, "status": "failed"}))
    written = (tmp_path / RESULTS).read_text()
    with pytest.raises(SystemExit) as refused:
        main([str(path), "--root", str(tmp_path)])
    assert refused.value.code == 2 and "use a complete `make run`" in capsys.readouterr().err
    assert (tmp_path / RESULTS).read_text() == written  # nothing written
    with pytest.raises(ValueError, match="exactly one <!-- generated:memory begin -->"):
        replace_block("no markers here", "memory", "body")


def test_the_guide_shows_learners_every_lesson_figure_from_the_run(tmp_path):
    copy_documents(tmp_path)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_series_summary()))
    main([str(path), "--root", str(tmp_path), "--blocks", "learners"])
    text = block((tmp_path / "docs" / "teachers.md").read_text(), "learners")
    assert text.startswith("Measured by one `make run` started 2026-11-25 19:00:00 (classroom defaults)")
    assert "AMD EPYC (avx2, avx512f, avx512_bf16; no AMX)" in text
    bullets = re.findall(r"^- \*\*([^*]+)\*\*", text, flags=re.M)
    assert bullets == ["Accuracy", "Parity.", "Evaluation and weight decay (04, section 7).",
                       "BatchNorm (05).", "Keras on JAX (12).", "Resume.", "Speed (08).", "Cost (11)."]
    assert "The one-device baseline (02) reaches 0.472" in text
    assert "12 (JAX `DataParallel`): 0.428 (-0.044)" in text  # the run's own gap, whatever it is
    assert "2 devices 0.95 (0.92–0.98)" in text  # a speed-up with its spread
    assert block((tmp_path / RESULTS).read_text(), "series-by-cpu") == committed("series-by-cpu")  # --blocks


def test_a_run_without_a_lesson_gives_no_bullet_for_it_and_without_02_none_at_all():
    summary = _series_summary()
    summary["notebooks"] = [e for e in summary["notebooks"] if not e["notebook"].startswith(("05", "11"))]
    text = learners_block(summary, "a run")
    assert "**BatchNorm (05).**" not in text and "**Cost (11).**" not in text and "**Speed (08).**" in text
    summary["notebooks"] = [e for e in summary["notebooks"] if not e["notebook"].startswith("02")]
    with pytest.raises(ValueError, match="no lesson 02"):
        learners_block(summary, "a run")


@pytest.mark.parametrize("lesson", sorted(READS))
def test_every_figure_the_guide_reads_is_recorded_by_its_lesson(lesson):
    notebook = next((ROOT / "notebooks").glob(f"{lesson}_*.ipynb"))
    code = "".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"])
    missing = [key for key in READS[lesson] if f'record("{key}"' not in code]
    assert not missing, f"{notebook.name} no longer records {missing}: update learner_figures.READS"


# Lesson 14's records from one real run of it (`make run RUN_ARGS="--only 14"`), as summary.json holds them.
PINNED = json.loads((Path(__file__).parent / "pinned_workers_records.json").read_text())
PINNED_ROWS = ["1 worker x 1 core", "2 workers x 1 core, strong", "2 workers x 1 core, weak",
               "1 process x 2 cores"]


def _bounds(cell: str) -> tuple[float, float, float]:
    ratio, low, high = re.search(r"; (\d+\.\d\d) \((\d+\.\d\d)-(\d+\.\d\d)\), ", cell).groups()
    return float(ratio), float(low), float(high)


def test_lesson_14s_columns_read_as_the_lesson_does_and_the_guide_holds_its_runs_column():
    held = ran("workers-by-cpu")
    for kind, column in held.items():
        assert list(column)[:4] == PINNED_ROWS, kind
        for row in PINNED_ROWS[1:]:
            ratio, low, high = _bounds(column[row])
            assert low <= ratio <= high
            reading = "faster" if low > 1 else "slower" if high < 1 else "within the spread"
            assert column[row].endswith(reading)
        assert re.fullmatch(r"\d+ us, \d+\.\d\d GB/s", column["link between workers: alpha, beta"])
    guide = committed("workers")
    line = re.search(r"Measured by (.*?run_tables`)", guide).group(1)
    _, _, lines = page.read_columns(committed("workers-by-cpu"))
    kind = next(k for k, v in lines.items() if v == line)  # the guide's run is one of the page's columns
    assert dict(list(parse_table(guide).items())[1:]) == {k: [v] for k, v in held[kind].items()}


def test_a_run_of_lesson_14_alone_rewrites_only_its_blocks_from_its_records(tmp_path):
    copy_documents(tmp_path)
    summary = {**_series_summary(), "overrides": {}}
    defaults = {"REPEATS": 3, "BENCH_STEPS": 5, "TARGET_ACCURACY": 0.4}
    summary["notebooks"] = [{"notebook": "14_pinned_workers.ipynb", "seconds": 95.0, "peak_rss_mb": 2000,
                             "end_rss_mb": 900, "records": PINNED, "defaults": defaults}]  # fmt: skip
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    before = block((tmp_path / RESULTS).read_text(), "series-by-cpu")
    main([str(path), "--root", str(tmp_path)])
    assert block((tmp_path / RESULTS).read_text(), "series-by-cpu") == before
    guide = block((tmp_path / "docs" / "teachers.md").read_text(), "workers")
    mine = columns(tmp_path, "workers-by-cpu")[page.KINDS[0]]
    assert {k: [v] for k, v in mine.items()} == dict(list(parse_table(guide).items())[1:])
    scaling, link, predicted = PINNED["scaling"], PINNED["link"], PINNED["prediction"]["2"]
    assert _bounds(mine["2 workers x 1 core, strong"]) == pytest.approx(
        (scaling["strong 2"]["speedup"], scaling["strong 2"]["low"], scaling["strong 2"]["high"]), abs=0.006)
    fitted = f"{1e6 * link['alpha']:.0f} us, {link['beta'] / 1e9:.2f} GB/s"
    assert mine["link between workers: alpha, beta"] == fitted
    assert mine["2-worker step: predicted, measured (range), error"].endswith(f", {predicted['error']:+.0%}")
    assert mine["minutes to the target test accuracy"].startswith("0.4: ") and "3 blocks of 5 steps" in guide
    assert "2026-11-25 19:00:00" in guide and "AMD EPYC" in guide


def test_the_guides_speed_reading_gives_busier_cores_only_their_own_share_of_a_speed_up():
    from mgtutor.classroom.learner_figures import _speed

    def reading(spread: tuple[float, float], cores: dict[str, float]) -> str:
        eight = {"strong_speedup": {"1": 1.0, "2": sum(spread) / 2}, "strong_speedup_spread": {
            "1": [1.0, 1.0], "2": list(spread)}, "weak_speedup": {"1": 1.0}, "weak_speedup_spread": {},
            "strong_cores_used": cores, "op_cores": 1.0}  # fmt: skip
        return _speed({"08": eight})

    # Lesson 08 on the Xeon with AMX: x1.07 (1.04-1.09) beside 1.83 -> 1.86 cores (x1.02): not the cause.
    little = reading((1.04, 1.09), {"1": 1.83, "2": 1.86})
    assert "only x1.02 busier, below the speed-up's range (from 1.04)" in little
    assert "each image took less CPU time" in little and "can account" not in little
    # The next run: 1.22 (1.0983-1.34) beside 1.7250 -> 1.8892 (x1.0952): both print 1.10, so a digit more.
    close = reading((1.0983, 1.3417), {"1": 1.7250, "2": 1.8892})
    assert "only x1.095 busier, below the speed-up's range (from 1.098)" in close
    assert "within the speed-up's range (from 1.04)" in reading((1.04, 1.09), {"1": 1.5, "2": 1.59})
    assert "x1.25 busier, as much as the speed-up:" in reading((1.04, 1.09), {"1": 1.5, "2": 1.875})
    # The study's own words (speed/reading.why_slower), naming the lesson as what did not take it apart.
    assert "a slowdown: the strategy's work each step" in reading((0.85, 0.95), {"1": 1.8, "2": 1.9})
    assert "the lesson does not separate the two." in reading((0.85, 0.95), {"1": 1.8, "2": 1.9})
    assert "No difference beyond the spread." in reading((0.95, 1.05), {"1": 1.8, "2": 1.9})


def test_a_run_that_took_a_preset_is_not_called_the_classroom_defaults():
    chosen = page.run_line(_series_summary(preset="slow-laptop"))
    assert "2026-11-25 19:00:00 (the slow-laptop preset) on laptop" in chosen
    both = page.run_line(_series_summary(preset="slow-laptop", overrides={"EPOCHS": 1}))
    assert "(the slow-laptop preset, EPOCHS=1) on laptop" in both
    assert "(classroom defaults)" in page.run_line(_series_summary(preset=None))


def test_a_run_line_says_how_fast_the_host_was_before_and_after_and_what_was_estimated():
    timed = _series_summary(reference_images_per_s=277.6, reference_end={"images_per_s": 359.2},
                            estimate_seconds=1487.6)  # fmt: skip
    line = page.run_line(timed)
    assert "3.15.1; its reference step 278 images/s before the run, 359 after, from which it estimated " \
           "24 min 48 s; generated by" in line
    assert "after" not in page.run_line(_series_summary(reference_images_per_s=277.6))  # a run cut short
    assert "reference step" not in page.run_line(_series_summary())  # runs from before it was recorded
