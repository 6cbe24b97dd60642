"""benchmarks/bench_peer.py's own logic, without the peer: the patch it applies to airbench (on a stand-in
package holding the lines it replaces), its refusal of another version, and the readings of a curve."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_peer", ROOT / "benchmarks" / "bench_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stand_in(folder: Path, bench, drop: str | None = None) -> None:
    """A package named airbench whose files hold each line PATCH replaces (all but `drop`)."""
    package = folder / "airbench"
    package.mkdir(parents=True)
    lines: dict[str, list[str]] = {"utils.py": [], "lib_airbench94.py": []}
    for name, old, _ in [*bench.PATCH, bench.SYNCHRONIZE, bench.SYNCHRONIZE]:
        if old != drop:
            lines[name].append(f"# {old}")
    for name, text in lines.items():
        (package / name).write_text("\n".join(text) + "\n")
    (package / "__init__.py").write_text("")


def test_the_patch_replaces_each_line_once_and_says_what_it_did(tmp_path, bench, monkeypatch):
    _stand_in(tmp_path / "installed", bench)
    monkeypatch.syspath_prepend(str(tmp_path / "installed"))
    for name in [m for m in sys.modules if m == "airbench" or m.startswith("airbench.")]:
        monkeypatch.delitem(sys.modules, name)
    airbench, applied = bench._patched_airbench(tmp_path / "patched")
    try:
        assert Path(airbench.__file__).parent == tmp_path / "patched" / "airbench"  # the copy
        utils = (tmp_path / "patched" / "airbench" / "utils.py").read_text()
        for name, old, new in bench.PATCH:
            text = (tmp_path / "patched" / "airbench" / name).read_text()
            assert old not in text and text.count(new) == 1
        assert "torch.cuda" not in utils and utils.count("# pass") == 2  # both synchronize calls
        assert len(applied) == len(bench.PATCH) + 2 and "(2 places)" in applied[-2]
        clock = airbench.utils.WallClock()  # the stand-in for CUDA's timing events
        start, end = clock, airbench.utils.WallClock()
        start.record()
        end.record()
        assert 0 <= start.elapsed_time(end) < 1e3  # milliseconds, as CUDA's
        assert (tmp_path / "patched" / "torchvision" / "transforms.py").exists()
    finally:
        for name in [m for m in sys.modules if m == "airbench" or m.startswith("airbench.")]:
            del sys.modules[name]
        sys.path.remove(str(tmp_path / "patched"))


def test_another_airbench_is_refused_naming_the_line_it_lacks(tmp_path, bench, monkeypatch):
    missing = bench.PATCH[2][1]  # the network's half precision on the GPU
    _stand_in(tmp_path / "installed", bench, drop=missing)
    monkeypatch.syspath_prepend(str(tmp_path / "installed"))
    with pytest.raises(SystemExit, match=r"found it 0 times: not airbench 0\.1\.8"):
        bench._patched_airbench(tmp_path / "patched")


def test_a_curve_is_read_between_its_epochs_from_chance_at_the_start(bench):
    curve = [{"minutes": 2.0, "accuracy": 0.5}, {"minutes": 4.0, "accuracy": 0.9}]
    assert bench.along(curve, "accuracy", 0.7, "minutes") == pytest.approx(3.0)  # half-way in epoch 2
    assert bench.along(curve, "accuracy", 0.3, "minutes") == pytest.approx(1.0)  # from 0.1 at 0 minutes
    assert bench.along(curve, "accuracy", 0.95, "minutes") is None  # never reached
    assert bench.along(curve, "minutes", 3.0, "accuracy") == pytest.approx(0.7)
    assert bench.along(curve, "minutes", 5.0, "accuracy") is None  # after its last epoch


def test_runs_are_written_whole_as_json_lines_with_their_curves(bench, tmp_path, capsys):
    curve = [{"minutes": 2.0, "accuracy": 0.5}]
    runs = {"peer": [{"plain": 0.8, "curve": curve}], "ours": [{"plain": 0.9, "curve": curve}] * 2}
    path = tmp_path / "runs.jsonl"
    bench.write_runs(path, runs)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    expected = [("peer", 0, 0.8), ("ours", 0, 0.9), ("ours", 1, 0.9)]
    assert [(r["side"], r["seed"], r["plain"]) for r in lines] == expected
    assert lines[2]["curve"] == curve and sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl"]
    assert str(path) in capsys.readouterr().out


def test_an_out_file_in_a_missing_folder_is_refused_before_any_run(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--out", str(tmp_path / "no-such-folder" / "runs.jsonl")])
    assert stopped.value.code == 2
    assert "--out: the folder of" in capsys.readouterr().err and not (tmp_path / "no-such-folder").exists()
