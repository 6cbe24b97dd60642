"""mgtutor.training.netns: a private network namespace with loopback only, made for real on this machine.

This machine and CI run as root on Linux, so a namespace can always be made here; where it
cannot, these tests fail and say why (no silent pass). The unavailable case is a real one:
a PATH without util-linux's unshare and nsenter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mgtutor.training import netns
from tests.conftest import ROOT

CHILD = ROOT / "tests" / "unit" / "training" / "netns_child.py"


def _create_or_fail(flags: list[str] | None = None) -> netns.Namespace:
    try:
        return netns.create() if flags is None else netns._start_holder(flags)
    except netns.IsolationUnavailable as err:
        pytest.fail(f"this machine cannot create a private network namespace: {err}")


@pytest.mark.parametrize("flags", [None, ["--user", "--map-root-user", "--net"]], ids=["default", "userns"])
def test_inside_only_loopback_exists_and_works(flags):
    """The route `create` takes here (root: unshare --net), and the unprivileged one (a user namespace)."""
    namespace = _create_or_fail(flags)
    try:
        done = subprocess.run(namespace.command([sys.executable, str(CHILD)]), pass_fds=namespace.fds,
                              capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    finally:
        namespace.close()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["netns"] != os.readlink("/proc/self/ns/net")  # not this process's namespace
    assert seen["interfaces"] == ["lo"]
    assert seen["received"] == "over loopback"
    assert namespace.user is (flags is not None or os.geteuid() != 0)


def test_availability_makes_one_says_how_and_closes_it():
    before = sorted(os.listdir("/proc/self/fd"))
    ok, how = netns.availability()
    if not ok:
        pytest.fail(f"this machine cannot create a private network namespace: {how}")
    assert how == ("unshare --net" if os.geteuid() == 0 else "unshare --user --map-root-user --net")
    assert sorted(os.listdir("/proc/self/fd")) == before  # the probe's namespace descriptors are closed


def test_without_util_linux_it_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: neither unshare nor nsenter
    ok, why = netns.availability()
    assert not ok and "'nsenter' (util-linux) is not installed" in why
    with pytest.raises(netns.IsolationUnavailable, match="apt install util-linux"):
        netns.create()


@pytest.mark.parametrize("value", ["yes", 1, 0, "auto"])
def test_isolate_takes_only_true_false_or_none(value):
    with pytest.raises(TypeError, match=r"isolate must be True, False or None, got"):
        netns.check_isolate(value)
    assert [netns.check_isolate(v) for v in (None, True, False)] == [None, True, False]


def test_the_note_says_what_is_exposed_for_how_long_and_what_to_do():
    note = netns.exposure_note([12345, 12346], "network namespaces exist only on Linux (this is darwin)")
    assert "every network interface (ports 12345, 12346)" in note and "no password" in note
    assert "for as long as this job runs" in note and "this is darwin" in note
    assert "answer deny" in note and "network you trust" in note
