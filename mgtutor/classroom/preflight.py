"""`make check`: will this laptop run the series? A checklist, each line ok or FAIL with the fix.

    python -m mgtutor.classroom.preflight [--allow-synthetic] [--ports 12345 12346] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from mgtutor.support.checklist import Check, failed, format_checklist

# (package, first bad version, last bad version, why): versions the series is known to fail on.
KNOWN_BAD = (
    ("keras", (3, 7), (3, 10), "MirroredStrategy regressions in Keras 3.7-3.10 (keras#21061, keras#20611)"),
    ("keras", (0, 0), (2, 99), "Keras 2 lacks the Keras 3 API the series teaches"),
    ("tensorflow", (0, 0), (2, 20), "the series is written and measured on TensorFlow 2.21"),
)
PARITY_TOLERANCE = 1e-4  # measured 1e-7 to 1e-8 on a healthy set-up
# Before any `make run` here: a floor above the largest notebook's peak on the brief's machine (the guide's
# memory table). After one, the check asks for what that run's largest notebook took (`memory_need`).
NEEDED_MEMORY_GB = 6.0
NEEDED_DISK_GB = 2.0
SMOKE_TIMEOUT = 75.0
JAX_SMOKE_TIMEOUT = 150.0  # XLA compiles each step function first: measured 55 s on a busy 2-core laptop
ARITHMETIC_TIMEOUT = 240.0  # four compiled probes of the capstone's network, two of them with XLA
SMOKE = "2-device smoke step"
ISOLATION = "network isolation"
JAX_SMOKE = "2-device JAX smoke step"
ARITHMETIC = "capstone arithmetic"
RUN_TIME = "run time"
PACKAGE = "package"
# This checkout's package: the one the notebooks must import.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _version(package: str) -> tuple[int, ...] | None:
    try:
        text = metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def check_versions(versions: dict[str, tuple[int, ...] | None], python: tuple[int, int]) -> list[Check]:
    """Python, TensorFlow and Keras against `KNOWN_BAD`; `versions` maps package -> (major, minor)."""
    checks = [Check("python", python >= (3, 10), f"Python {python[0]}.{python[1]}",
                    "install Python 3.10 or newer, then make clean setup")]  # fmt: skip
    for package in ("tensorflow", "keras", "jax"):
        found = versions.get(package)
        if found is None:
            checks.append(Check(package, False, "not installed", "make setup"))
            continue
        if package == "jax":  # lesson 12's backend: any version pip resolved beside TensorFlow
            shown = ".".join(map(str, found))
            checks.append(Check(package, True, f"jax {shown} (lesson 12's Keras backend)"))
            continue
        shown = ".".join(map(str, found))
        bad = [why for name, low, high, why in KNOWN_BAD if name == package and low <= found[:2] <= high]
        fix = 'make clean setup (pyproject.toml pins "tensorflow>=2.21,<2.22" and "keras>=3.11")'
        checks.append(Check(package, not bad, f"{package} {shown}" + (f": {bad[0]}" if bad else ""), fix))
    return checks


def check_package(python: Sequence[str] = (sys.executable,), expected: Path = PACKAGE_DIR) -> Check:
    """Does `python`, started outside this folder, import this checkout's mgtutor?

    This process finds it by its working folder; the notebooks' kernel starts in notebooks/ and finds only
    what the venv installed. An editable install made from another clone into this venv (`make test
    VENV=...` there) points the kernel at that clone, and lesson 00 then fails on its first import."""
    fix = f"{sys.executable} -m pip install --no-deps -e {PACKAGE_DIR.parent}; then make check again"
    try:
        done = subprocess.run([*python, "-c", "import mgtutor; print(mgtutor.__file__)"], capture_output=True,
                              text=True, cwd=tempfile.gettempdir(), timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired:  # a hung import is a broken install too; the checklist goes on
        return Check(PACKAGE, False, "importing mgtutor did not finish in 60 s", fix)
    if done.returncode != 0:
        return Check(PACKAGE, False, "not installed in this Python: the notebooks cannot import mgtutor", fix)
    found = Path(done.stdout.strip()).resolve().parent
    if found != expected:
        return Check(PACKAGE, False, f"mgtutor imports from {found}, not from this folder ({expected})", fix)
    return Check(PACKAGE, True, f"mgtutor imports from {found}, from outside this folder too")


def smoke_child(*extra: str, timeout: float) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Run ``python -m mgtutor.classroom.preflight_smoke *extra`` (logical devices are fixed once per
    process, so each check gets its own): the finished process and its reported result, if any.
    Raises ``subprocess.TimeoutExpired`` past `timeout` seconds."""
    from mgtutor.support.processes import parse_result

    done = subprocess.run(
        [sys.executable, "-m", "mgtutor.classroom.preflight_smoke", *extra], capture_output=True,
        text=True, timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    result = next((r for r in map(parse_result, done.stdout.splitlines()) if r is not None), None)
    return done, (result if done.returncode == 0 else None)


def check_smoke(backend: str = "tensorflow") -> Check:
    """The 2-device smoke step in a child process (`smoke_child`)."""
    name, extra = (JAX_SMOKE, ["jax"]) if backend == "jax" else (SMOKE, [])
    timeout = JAX_SMOKE_TIMEOUT if backend == "jax" else SMOKE_TIMEOUT
    command = " ".join(["python -m mgtutor.classroom.preflight_smoke", *extra])
    started = time.perf_counter()
    try:
        done, result = smoke_child(*extra, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Check(name, False, f"no answer in {timeout:.0f} s",
                     f"close other programs; run {command} to see where it hangs")  # fmt: skip
    if result is None:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Check(name, False, f"failed: {tail}", "make clean setup; then make check again")
    seconds = time.perf_counter() - started
    good = result["difference"] <= PARITY_TOLERANCE and not result["nan"]
    nan = ", NaN in the weights" if result["nan"] else ""
    detail = (f"{len(result['devices'])} {result['kind']} devices, 2 vs 1 device max weight difference "
              f"{result['difference']:.1e}{nan} ({seconds:.0f} s)")  # fmt: skip
    build = "JAX" if backend == "jax" else "TensorFlow"
    return Check(name, good, detail, f"reinstall: make clean setup (a broken {build} build)",
                 value=result.get("reference_images_per_s"))  # fmt: skip


def check_run_time(smoke: Check) -> Check:
    """This laptop's `make run`, estimated from the smoke step's reference step, and what `make run` will
    run for it: the classroom defaults, or the slow-laptop preset where they would pass the target."""
    from mgtutor.classroom.estimate import REFERENCE, choose_preset

    if not smoke.value:
        return Check(RUN_TIME, False, "no estimate: the reference step did not run",
                     "fix the 2-device smoke step first", warning=True)  # fmt: skip
    sizing = choose_preset(smoke.value)
    detail = (f"make run with no PRESET will use {sizing.line()} (the reference step, lesson 02's CNN: "
              f"{smoke.value:,.0f} images/s; reference CPU: {REFERENCE['run']})")  # fmt: skip
    if sizing.fits:
        return Check(RUN_TIME, True, detail, value=sizing.seconds)
    return Check(RUN_TIME, False, detail,
                 "run the series before the class (make run), then teach from the executed notebooks in "
                 "runs/; docs/teachers.md, 'The slowest laptop in the room'",
                 warning=True, value=sizing.seconds)  # fmt: skip


def check_cpu() -> Check:
    """The CPU and the features that decide whether bfloat16 is fast on it; a FAIL only without AVX."""
    from mgtutor.support.system import cpu, describe_cpu

    info = cpu()
    features = info["features"]
    if not info.get("avx", True):
        return Check("cpu", False, f"{describe_cpu(info)}: no AVX. The series needs at least a 64-bit CPU "
                     "with AVX: TensorFlow's wheels are built for it, and without it `import tensorflow` "
                     "stops with 'Illegal instruction' (the slowest CPU the series is tested on has AVX2)",
                     "use another laptop, or a TensorFlow built from source without AVX")  # fmt: skip
    if "amx_bf16" in features:
        where = "bfloat16 matrix products on AMX tiles"
    elif "avx512_bf16" in features:
        where = "bfloat16 dot products in AVX-512, no AMX"
    else:
        where = "no bfloat16 instructions listed: converted to float32"
    return Check("cpu", True, f"{describe_cpu(info)}: {where}; {os.cpu_count()} cores "
                 "(the series needs AVX at least)")  # fmt: skip


def check_arithmetic() -> Check:
    """What lesson 16 will train with here: its own picker, in a child process (a warning if it fails)."""
    from mgtutor.support.processes import parse_result

    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mgtutor.classroom.preflight_arithmetic"], capture_output=True, text=True,
            timeout=ARITHMETIC_TIMEOUT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Check(ARITHMETIC, False, f"no answer in {ARITHMETIC_TIMEOUT:.0f} s", "close other programs; "
                     "the capstone times its arithmetic itself at its start", warning=True)  # fmt: skip
    result = next((r for r in map(parse_result, done.stdout.splitlines()) if r is not None), None)
    if done.returncode != 0 or result is None:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Check(ARITHMETIC, False, f"failed: {tail}",
                     "run python -m mgtutor.classroom.preflight_arithmetic to see why",
                     warning=True)  # fmt: skip
    picked = f"{result['precision']}, XLA {'on' if result['xla'] else 'off'}"
    others = ", ".join(f"{name} {rate:,.0f}" for name, rate in result["rates"].items() if name != picked)
    return Check(ARITHMETIC, True, f"lesson 16 would train in {picked}, the fastest here: "
                 f"{result['rates'][picked]:,.0f} images/s (timed: {others}; "
                 f"{time.perf_counter() - started:.0f} s)")  # fmt: skip


def check_data(allow_synthetic: bool) -> list[Check]:
    """Which copy of each data set the notebooks would read, without downloading anything."""
    from mgtutor.data import DataError, DataNotFoundError, load_dataset

    fix = ("once online: python -m mgtutor.classroom.datakit download --to DIR; copy DIR here; "
           "set MGTUTOR_DATA_DIR=DIR")
    checks = []
    for name in ("cifar10", "mnist"):
        try:
            data = load_dataset(name, synthetic_fallback=False, allow_download=False)
        except DataNotFoundError:
            detail = "not found; the notebooks would use the labelled synthetic stand-in"
            checks.append(Check(f"data {name}", False, detail, fix, warning=allow_synthetic))
        except DataError as err:
            checks.append(Check(f"data {name}", False, f"damaged: {err}".splitlines()[0], fix))
        else:
            checks.append(Check(f"data {name}", True, f"real data, from {data.source}"))
    checks.append(_check_full_cifar10())
    return checks


def _check_full_cifar10() -> Check:
    """The whole CIFAR-10 (`load_dataset(..., full=True)`), for a real accuracy; lessons take a subset."""
    from mgtutor.data import DataError, load_dataset

    try:
        data = load_dataset("cifar10", synthetic_fallback=False, allow_download=False, full=True)
    except DataError as err:
        found = [line.split(": ", 1)[1] for line in str(err).splitlines() if " holds " in line]
        detail = f"not here ({found[0]})" if found else "not here"
        fix = ("python -m mgtutor.classroom.datakit download --to DIR (the official archive); "
               "set MGTUTOR_DATA_DIR=DIR")
        return Check("data cifar10, whole", False, detail, fix, warning=True)
    sizes = f"{len(data.y_train):,} + {len(data.y_test):,} images"
    return Check("data cifar10, whole", True, f"{sizes}, from {data.source}")


def check_ports(ports: Sequence[int]) -> Check:
    """Notebook 10's workers need localhost ports: the given ones free, or 2 free ones to pick."""
    taken = []
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    if taken:
        return Check("ports", False, f"port(s) {', '.join(map(str, taken))} on localhost are taken",
                     f"see which program holds them (ss -ltnp | grep {taken[0]}, or lsof -i :{taken[0]}) "
                     "and stop it, or choose other ports")  # fmt: skip
    from mgtutor.training.cluster import free_ports

    picked = free_ports(2)
    named = f"{', '.join(map(str, ports))} free" if ports else f"free ports found ({picked[0]}, {picked[1]})"
    return Check("ports", True, f"localhost: {named}")


def check_isolation() -> Check:
    """Can notebook 10's workers run in a private network namespace (loopback only) here? Made to see."""
    from mgtutor.training.netns import availability

    ok, detail = availability()
    if ok:
        return Check(ISOLATION, True, "notebook 10's workers run in a private network namespace with "
                     f"loopback only, unreachable from the network (made with {detail})")  # fmt: skip
    return Check(ISOLATION, False, f"unavailable ({detail}): notebook 10's workers will listen on every "
                 "network interface, without a password, while they run",
                 "answer deny to the firewall prompt and use a network you trust; on Linux, root or "
                 "unprivileged user namespaces (if your administrator allows them) give isolation",
                 warning=True)  # fmt: skip


def memory_need(runs: Path) -> tuple[float, str]:
    """GB the series needs here and why: the newest complete `make run` under `runs`, or the floor."""
    for path in sorted(runs.glob("*/summary.json"), reverse=True):  # run folders are named by their start
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        peaks = [(e.get("peak_rss_mb", 0), e["notebook"][:2]) for e in summary.get("notebooks", [])]
        # a preset's peaks, or a few lessons' (--only), are not what the whole series at defaults needs
        whole_at_defaults = not summary.get("preset") and not summary.get("only")
        if summary.get("status") == "complete" and whole_at_defaults and peaks and max(peaks)[0] > 0:
            peak, notebook = max(peaks)
            return peak / 1000, f"notebook {notebook}'s peak in {path.parent.name}"
    return NEEDED_MEMORY_GB, "before any make run here; make run measures what each notebook takes"


def check_resources(folder: Path, runs: Path | None = None) -> list[Check]:
    import psutil

    free_disk = shutil.disk_usage(folder).free / 2**30
    memory = psutil.virtual_memory()
    total, available = memory.total / 2**30, memory.available / 2**30
    need, why = memory_need(runs if runs is not None else folder / "runs")
    return [
        Check("disk", free_disk >= NEEDED_DISK_GB, f"{free_disk:.1f} GB free in {folder}",
              f"free at least {NEEDED_DISK_GB:.0f} GB (make reset removes the notebooks' working folders)"),
        check_memory(available, total, need, why),
    ]  # fmt: skip


def check_memory(available: float, total: float, need: float, why: str) -> Check:
    """ok with `need` GB available; a WARN offering the low-memory preset where its ceiling is; else FAIL."""
    from mgtutor.classroom.presets import LOW_MEMORY, LOW_MEMORY_PEAK_MB

    low = LOW_MEMORY_PEAK_MB / 1000
    found = f"{available:.1f} GB available of {total:.1f} GB"
    needs = f"the series needs {need:.1f} GB at classroom defaults: {why}"
    close = "close other programs and notebook kernels (JupyterLab: Kernel > Shut Down All Kernels)"
    if available >= need:
        return Check("memory", True, f"{found} ({needs})")
    if need <= low:  # a run here needed less than the preset's ceiling: the preset would not help
        return Check("memory", False, f"{found} ({needs})", close)
    if available >= low:
        return Check("memory", False, f"{found}: too little for the classroom defaults ({needs}); enough for "
                     f"the {LOW_MEMORY} preset, whose peak is at most {low:.1f} GB a notebook",
                     f"make run PRESET={LOW_MEMORY} (docs/teachers.md, Memory), or {close}",
                     warning=True)  # fmt: skip
    return Check("memory", False, f"{found}: too little even for the {LOW_MEMORY} preset, at most {low:.1f} "
                 f"GB a notebook ({needs})", f"{close}; then make run PRESET={LOW_MEMORY}")  # fmt: skip


def run_checks(
    *, allow_synthetic: bool = False, ports: Sequence[int] = (), folder: Path | None = None,
    arithmetic: bool = True,
) -> list[Check]:
    """Every check, in checklist order; `arithmetic` False leaves out the capstone's arithmetic, which a
    `make run` that holds lesson 16 times again at its start: the same timings twice in one slot."""
    versions = {package: _version(package) for package in ("tensorflow", "keras", "jax")}
    checks = check_versions(versions, sys.version_info[:2])
    checks.append(check_package())
    checks.append(check_cpu())
    smoke = check_smoke()
    checks += [smoke, check_run_time(smoke), check_smoke("jax")]
    if arithmetic:
        checks.append(check_arithmetic())
    checks.extend(check_data(allow_synthetic))
    checks.append(check_ports(ports))
    checks.append(check_isolation())
    checks.extend(check_resources(folder or Path.cwd()))
    return checks


def checklist_html(checks: Sequence[dict]) -> str:
    """The checklist as an HTML list for the run report (empty when there was none)."""
    from html import escape

    items = []
    for check in checks:
        word = "ok" if check["ok"] else ("warn" if check["warning"] else "fail")
        fix = "" if check["ok"] else f" — fix: {escape(check['fix'])}"
        items.append(f'<li class="{word}"><b>{word.upper()}</b> {escape(check["name"])}: '
                     f"{escape(check['detail'])}{fix}</li>")  # fmt: skip
    return '<h2>Preflight</h2>\n<ul class="preflight">\n' + "\n".join(items) + "\n</ul>\n" if items else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mgtutor.classroom.preflight", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--allow-synthetic", action="store_true", help="missing data only warns")
    parser.add_argument("--ports", type=int, nargs="*", default=[], help="localhost ports that must be free")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    args = parser.parse_args(argv)
    bad_ports = [p for p in args.ports if not 0 < p < 65536]
    if bad_ports:
        parser.error(f"--ports: {bad_ports} are not ports (1-65535)")
    started = time.perf_counter()
    checks = run_checks(allow_synthetic=args.allow_synthetic, ports=args.ports)
    if args.json:
        print(json.dumps({"ok": not failed(checks), "checks": [asdict(c) for c in checks]}))
    else:
        print(format_checklist(checks, colour=sys.stdout.isatty()))
        verdict = "FAILED: fix the lines marked FAIL" if failed(checks) else "ready"
        print(f"\npreflight {verdict} ({time.perf_counter() - started:.0f} s)")
    return 1 if failed(checks) else 0


if __name__ == "__main__":
    sys.exit(main())
