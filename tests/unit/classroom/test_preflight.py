"""mgtutor.classroom.preflight (`make check`): its lines red with data missing and a port taken; a real run
of the whole checklist, green on this set-up; the known-bad version table checked line by line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from mgtutor.classroom import preflight
from mgtutor.support.checklist import format_checklist
from tests.conftest import ROOT


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mgtutor.classroom.preflight", *args], capture_output=True,
                          text=True,
                          env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=420)  # fmt: skip


@pytest.mark.parametrize(
    ("package", "version", "ok", "named"),
    [
        ("keras", (3, 7), False, "keras#21061"),
        ("keras", (3, 10), False, "keras#20611"),
        ("keras", (3, 11), True, ""),
        ("keras", (2, 15), False, "Keras 2"),
        ("tensorflow", (2, 20), False, "2.21"),
        ("tensorflow", (2, 21), True, ""),
    ],
)
def test_known_bad_versions_are_named_with_their_issue(package, version, ok, named):
    versions = {"tensorflow": (2, 21), "keras": (3, 15), package: version}
    line = next(c for c in preflight.check_versions(versions, (3, 11)) if c.name == package)
    assert line.ok is ok
    assert named in line.detail
    assert preflight.check_versions(versions, (3, 9))[0].ok is False  # Python 3.9


def test_the_jax_version_is_reported_and_its_absence_fails():
    versions = {"tensorflow": (2, 21, 0), "keras": (3, 15, 1), "jax": (0, 10, 2)}
    line = next(c for c in preflight.check_versions(versions, (3, 11)) if c.name == "jax")
    assert line.ok and line.detail.startswith("jax 0.10.2")
    missing = next(c for c in preflight.check_versions({**versions, "jax": None}, (3, 11)) if c.name == "jax")
    assert not missing.ok and missing.fix == "make setup"


def test_data_missing_and_a_port_taken_fail_naming_the_fix(monkeypatch, tmp_path, capsys):
    # The failing lines alone, as run_checks makes and main prints them: the timed steps are the good
    # set-up's test below, so this one costs none of their minutes
    empty = tmp_path / "nothing"
    empty.mkdir()
    for name, value in (("MGTUTOR_OFFLINE", "1"), ("KERAS_HOME", empty), ("MGTUTOR_DATA_DIR", empty)):
        monkeypatch.setenv(name, str(value))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        checks = [*preflight.check_data(allow_synthetic=False), preflight.check_ports([port])]
    checks.append(preflight.check_isolation())
    assert preflight.failed(checks)
    shown = format_checklist(checks, colour=False)
    lines = shown.splitlines()
    assert any(line.startswith("FAIL  data cifar10: not found") for line in lines)
    assert any(line.startswith("WARN  data cifar10, whole: not here") for line in lines)  # capstone only
    assert any(line.startswith("FAIL  ports:") and str(port) in line for line in lines)
    assert "python -m mgtutor.classroom.datakit download --to DIR" in shown
    assert f"lsof -i :{port}" in shown
    isolation = "  ok  network isolation: notebook 10's workers run in a private network namespace"
    assert any(line.startswith(isolation) for line in lines)  # this machine (and CI): root on Linux
    with pytest.raises(SystemExit):  # a port that cannot be one is refused before any check runs
        preflight.main(["--ports", "0", "70000"])
    assert "--ports: [0, 70000] are not ports (1-65535)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_good_set_up_passes_with_the_parity_number(tmp_path):
    if not os.environ.get("MGTUTOR_DATA_DIR"):
        pytest.skip("MGTUTOR_DATA_DIR not set: the data lines would be red")
    done = _run("--json", env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    checks = {c["name"]: c for c in report["checks"]}
    smoke = checks[preflight.SMOKE]
    assert smoke["ok"] and "max weight difference" in smoke["detail"]
    difference = float(smoke["detail"].split("max weight difference ")[1].split()[0])
    assert difference <= preflight.PARITY_TOLERANCE
    jax_smoke = checks[preflight.JAX_SMOKE]
    assert jax_smoke["ok"] and jax_smoke["detail"].startswith("2 logical-cpu devices")
    jax_difference = float(jax_smoke["detail"].split("max weight difference ")[1].split()[0])
    assert jax_difference <= preflight.PARITY_TOLERANCE
    assert checks["jax"]["ok"] and checks["jax"]["detail"].startswith("jax 0.10")
    assert checks["data cifar10"]["detail"].startswith("real data, from ")
    whole = checks["data cifar10, whole"]  # ../shared/data: a subset for the lessons, the full set
    assert whole["ok"] and whole["detail"].startswith("50,000 + 10,000 images, from ")
    # The CPU's bfloat16 features, and what the capstone's own picker chose here (whichever is fastest)
    cpu_line = checks["cpu"]["detail"]
    assert checks["cpu"]["ok"] and ("no AMX" in cpu_line) != ("amx_bf16" in cpu_line)
    arithmetic = checks[preflight.ARITHMETIC]
    assert arithmetic["ok"] and arithmetic["detail"].startswith("lesson 16 would train in ")
    run_time = checks[preflight.RUN_TIME]  # ok, or a warning on a laptop too slow for the slot
    assert run_time["value"] > 60 and run_time["detail"].startswith("make run with no PRESET will use the ")
    assert smoke["value"] > 0 and f"{smoke['value']:,.0f} images/s" in run_time["detail"]


def test_isolation_is_reported_and_only_warns_where_unavailable(monkeypatch, tmp_path):
    here = preflight.check_isolation()  # this machine (and CI) runs as root on Linux
    made = "unshare --net" if os.geteuid() == 0 else "unshare --user --map-root-user --net"
    assert here.ok and here.detail.endswith(f"(made with {made})"), here.detail
    monkeypatch.setenv("PATH", str(tmp_path))  # no util-linux: a machine where it is unavailable
    missing = preflight.check_isolation()
    assert not missing.ok and missing.warning and not preflight.failed([missing])
    assert "'nsenter' (util-linux) is not installed" in missing.detail
    assert "every network interface" in missing.detail and "firewall prompt" in missing.fix


def test_missing_data_only_warns_with_allow_synthetic():
    checks = preflight.check_data(allow_synthetic=True)
    assert all(c.ok or c.warning for c in checks)
    assert not preflight.failed([preflight.Check("data x", False, "missing", warning=True)])
    assert preflight.failed([preflight.Check("ports", False, "taken")])


def test_the_package_line_finds_this_checkout_outside_its_folder_and_names_a_stray_install(tmp_path):
    here = preflight.check_package()
    assert here.ok and str(ROOT / "mgtutor") in here.detail
    # An editable install from another clone (this venv's finder pointed there): the kernel would import it.
    elsewhere = preflight.check_package(expected=tmp_path / "mgtutor")
    assert not elsewhere.ok and f"not from this folder ({tmp_path / 'mgtutor'})" in elsewhere.detail
    assert "pip install --no-deps -e" in elsewhere.fix and str(ROOT) in elsewhere.fix
    # No site-packages at all (-S): nothing installed for the notebooks' kernel to import.
    missing = preflight.check_package(python=(sys.executable, "-S"))
    assert not missing.ok and "not installed" in missing.detail and missing.fix


def test_the_cpu_line_names_the_bfloat16_features(monkeypatch):
    from mgtutor.support import system

    cases = ((["avx512f", "avx512_bf16", "amx_tile", "amx_bf16"], "on AMX tiles"),
             (["avx2", "avx512f", "avx512_bf16"], "in AVX-512, no AMX"),
             (["avx2"], "converted to float32"))  # fmt: skip
    for features, words in cases:
        monkeypatch.setattr(system, "cpu", lambda found=features: {"model": "a CPU", "features": found})
        line = preflight.check_cpu()
        assert line.ok and line.detail.startswith(f"a CPU ({', '.join(features)}") and words in line.detail


def test_a_cpu_without_avx_fails_naming_the_minimum(monkeypatch):
    from mgtutor.support import system

    monkeypatch.setattr(system, "cpu", lambda: {"model": "an old CPU", "features": [], "avx": False})
    line = preflight.check_cpu()
    assert not line.ok and not line.warning and "needs at least a 64-bit CPU with AVX" in line.detail
    assert "Illegal instruction" in line.detail and line.fix


def test_the_run_time_line_names_the_preset_make_run_will_use_and_both_estimates():
    from mgtutor.classroom.estimate import REFERENCE, SLOT_SECONDS, TARGET_SECONDS, rate_for

    fast = rate_for(0.9 * TARGET_SECONDS)  # the defaults at 90 % of the target
    same = preflight.check_run_time(preflight.Check(preflight.SMOKE, True, "", value=fast))
    assert same.ok and same.value == pytest.approx(0.9 * TARGET_SECONDS)
    assert same.detail.startswith("make run with no PRESET will use the classroom defaults: about 12 min 36 s"
                                  " here, within")  # fmt: skip
    assert f"{fast:,.0f} images/s" in same.detail and "with the slow-laptop preset: about " in same.detail
    rate = rate_for(0.99 * SLOT_SECONDS, "slow-laptop")  # past the target at defaults, the preset within
    k = REFERENCE["images_per_s"] / rate
    sized = preflight.check_run_time(preflight.Check(preflight.SMOKE, True, "", value=rate))
    assert sized.ok and sized.value == pytest.approx(0.99 * SLOT_SECONDS)
    assert sized.detail.startswith("make run with no PRESET will use the slow-laptop preset: about 14 min"
                                   " 51 s here, where")  # fmt: skip
    assert f"{k:.2f}x the reference CPU's time" in sized.detail
    slow = preflight.check_run_time(preflight.Check(preflight.SMOKE, True, "", value=rate / 1.1))
    assert not slow.ok and slow.warning and slow.value > SLOT_SECONDS
    assert "Even the preset is over the 15-minute slot" in slow.detail and "slowest laptop" in slow.fix
    missing = preflight.check_run_time(preflight.Check(preflight.SMOKE, False, "failed"))
    assert missing.warning and missing.value is None


def test_the_memory_check_asks_for_what_the_last_complete_run_took(tmp_path):
    from mgtutor.classroom.preflight import NEEDED_MEMORY_GB, check_resources, memory_need

    runs = tmp_path / "runs"
    assert memory_need(runs) == (NEEDED_MEMORY_GB, "before any make run here; make run measures what each "
                                 "notebook takes")  # fmt: skip
    for name, status, peaks in (("20261127-010000", "complete", [900, 4318, 1200]),
                                ("20261127-020000", "failed", [9000])):  # fmt: skip
        (runs / name).mkdir(parents=True)
        notebooks = [{"notebook": f"{i:02d}_x.ipynb", "peak_rss_mb": p} for i, p in enumerate(peaks)]
        (runs / name / "summary.json").write_text(json.dumps({"status": status, "notebooks": notebooks}))
    (runs / "20261127-030000").mkdir()
    (runs / "20261127-030000" / "summary.json").write_text("{not json")  # a run killed while writing
    need, why = memory_need(runs)
    assert need == pytest.approx(4.318) and why == "notebook 01's peak in 20261127-010000"
    (runs / "20261127-040000").mkdir()  # a later run under the low-memory preset: not the defaults' need
    preset_run = {"status": "complete", "preset": "low-memory",
                  "notebooks": [{"notebook": "13_x.ipynb", "peak_rss_mb": 2600}]}  # fmt: skip
    (runs / "20261127-040000" / "summary.json").write_text(json.dumps(preset_run))
    (runs / "20261127-050000").mkdir()  # a later run of two lessons (--only 12 15): not the series' need
    part_run = {"status": "complete", "only": ["12", "15"],
                "notebooks": [{"notebook": "15_x.ipynb", "peak_rss_mb": 3019}]}  # fmt: skip
    (runs / "20261127-050000" / "summary.json").write_text(json.dumps(part_run))
    assert memory_need(runs) == (need, why)
    memory = next(c for c in check_resources(tmp_path) if c.name == "memory")
    assert "needs 4.3 GB at classroom defaults: notebook 01's peak in 20261127-010000" in memory.detail


def test_the_memory_check_offers_the_low_memory_preset_where_only_it_fits():
    from mgtutor.classroom.preflight import check_memory

    why = "notebook 13's peak in 20261129-001601"
    ok = check_memory(5.0, 8.0, 4.3, why)
    assert ok.ok and ok.detail == (f"5.0 GB available of 8.0 GB (the series needs 4.3 GB at classroom "
                                   f"defaults: {why})")
    offered = check_memory(3.5, 8.0, 4.3, why)  # below the defaults' need, above the preset's 3.0
    assert not offered.ok and offered.warning and "make run PRESET=low-memory" in offered.fix
    assert "needs 4.3 GB at classroom defaults" in offered.detail
    assert "at most 3.0 GB a notebook" in offered.detail
    short = check_memory(2.5, 4.0, 4.3, why)  # below both: a FAIL giving both figures
    assert not short.ok and not short.warning
    assert "too little even for the low-memory preset, at most 3.0 GB" in short.detail
    assert "needs 4.3 GB" in short.detail
    small_need = check_memory(2.5, 4.0, 2.8, why)  # the defaults needed less than the preset's ceiling
    assert not small_need.ok and not small_need.warning and "PRESET" not in small_need.fix
