"""A private network namespace with loopback only, for a multi-worker job's workers (Linux).

TensorFlow's gRPC server listens on every network interface whatever ``TF_CONFIG`` says, and
runs whatever operations a client sends, without authentication. In a new network namespace
the only interface is loopback: the workers still reach each other on ``localhost``, and
nothing outside the machine (nor outside the namespace) can reach them.

How: a short-lived *holder* process is started in a new namespace (``unshare --net`` as
root; ``unshare --user --map-root-user --net`` otherwise, where the system allows
unprivileged user namespaces), brings loopback up and checks it is the only interface. The
launcher keeps the namespace alive by holding its file descriptors, and starts every worker
inside it with ``nsenter`` (which sets the namespace, then executes the worker: same process,
same pipes, same process group, same files; only the network is private). By hand, as root
(each worker with its own ``TF_CONFIG``, as `mgtutor.training.worker.tf_config` writes it)::

    unshare --net sh -c 'ip link set lo up; TF_CONFIG=$C0 python w.py & TF_CONFIG=$C1 python w.py & wait'

Run as a script (``python netns.py hold``) this file is the holder; it imports nothing from
the package, so it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_READY_SECONDS = 10.0
_exposure_told = False  # the note on unisolated workers is printed once per process
_READY = "ready"
# ioctl numbers and flag from <linux/sockios.h> and <net/if.h>; struct ifreq is 40 bytes.
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
# sysctls that forbid unprivileged user namespaces, with the value that forbids them.
_USERNS_SWITCHES = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
    ("/proc/sys/user/max_user_namespaces", "0"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
)


class IsolationUnavailable(RuntimeError):
    """No private network namespace can be made here; the message says why."""


@dataclass(frozen=True)
class Namespace:
    """An open private network namespace: `command` wraps a worker's argv to run inside it.

    `fds` (the user namespace's, if any, then the network namespace's) keep it alive: pass them
    to the worker's `subprocess.Popen` (``pass_fds``) and `close` it once every worker started.
    """

    fds: tuple[int, ...]
    user: bool
    how: str  # the command that made it, e.g. "unshare --net"

    def command(self, argv: Sequence[str]) -> list[str]:
        enter = [_tool("nsenter")]
        if self.user:
            enter += [f"--user=/proc/self/fd/{self.fds[0]}", "--preserve-credentials"]
        return [*enter, f"--net=/proc/self/fd/{self.fds[-1]}", "--", *argv]

    def close(self) -> None:
        """Close the descriptors: the namespace goes when its last worker exits."""
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise IsolationUnavailable(
            f"the command {name!r} (util-linux) is not installed or not on PATH "
            "(Debian/Ubuntu: apt install util-linux)"
        )
    return found


def _userns_switch() -> str:
    """The sysctl that forbids unprivileged user namespaces here, as 'name = value', or ''."""
    for path, forbidding in _USERNS_SWITCHES:
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        if value == forbidding:
            return f"{path.removeprefix('/proc/sys/').replace('/', '.')} = {value}"
    return ""


def _start_holder(flags: Sequence[str]) -> Namespace:
    """Start a holder in a new namespace made with `unshare` `flags`; open its namespaces."""
    how = " ".join(["unshare", *flags])
    argv = [_tool("unshare"), *flags, "--", sys.executable, "-I", str(Path(__file__).resolve()), "hold"]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stderr is not None
        ready = select.select([holder.stdout], [], [], _READY_SECONDS)[0]
        words = holder.stdout.readline().split() if ready else []
        if words[:1] != [_READY]:
            holder.kill()
            said = (holder.stderr.read().strip().splitlines() or ["no answer"])[-1]
            raise IsolationUnavailable(f"{how} failed: {said}")
        if words[1:] != ["lo"]:
            raise IsolationUnavailable(f"the new namespace has interfaces besides loopback: {words[1:]}")
        kinds = ["user", "net"] if "--user" in flags else ["net"]
        fds = tuple(os.open(f"/proc/{holder.pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC) for kind in kinds)
        return Namespace(fds=fds, user="--user" in flags, how=how)
    finally:
        for stream in (holder.stdin, holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()  # stdin's end-of-file tells the holder to exit
        try:
            holder.wait(timeout=_READY_SECONDS)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


def create() -> Namespace:
    """A new private network namespace with loopback up; `IsolationUnavailable` says why not."""
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable(f"network namespaces exist only on Linux (this is {sys.platform})")
    _tool("nsenter")  # the workers need it as much as the holder needs unshare
    attempts = [["--user", "--map-root-user", "--net"]]
    if os.geteuid() == 0:
        attempts.insert(0, ["--net"])  # root needs no user namespace (and containers may forbid them)
    failures = []
    for flags in attempts:
        try:
            return _start_holder(flags)
        except IsolationUnavailable as err:
            failures.append(str(err))
    switch = _userns_switch()
    because = f" (unprivileged user namespaces are switched off here: {switch})" if switch else ""
    raise IsolationUnavailable("; ".join(failures) + because)


def availability() -> tuple[bool, str]:
    """(True, how) when a namespace can be made here, by making one; else (False, why not)."""
    try:
        namespace = create()
    except IsolationUnavailable as err:
        return False, str(err)
    namespace.close()
    return True, namespace.how


def check_isolate(isolate: object) -> bool | None:
    """`launch`'s ``isolate``: None (isolate where possible), True (must) or False (don't)."""
    if isolate is not None and not isinstance(isolate, bool):
        raise TypeError(
            f"isolate must be True, False or None, got {isolate!r}: None isolates the workers where this "
            "machine allows it, True refuses to run without isolation, False never isolates."
        )
    return isolate


def exposure_note(ports: Sequence[int], why: str) -> str:
    """What a job run without isolation exposes, for how long, and what to do, in plain words."""
    listed = ", ".join(map(str, ports))
    return (
        f"Note: these workers are reachable from the network. TensorFlow's workers listen on every network "
        f"interface (ports {listed}) and run whatever a connecting program asks, with no password, for as "
        f"long as this job runs (until its workers exit, or launch's timeout stops them). They could not be "
        f"isolated on this machine: {why}. If a firewall asks whether to allow them, answer deny / cancel "
        f"(the workers talk to each other over localhost, which the firewall does not block); otherwise run "
        f"this only on a network you trust."
    )


def for_workers(isolate: bool | None, ports: Sequence[int]) -> Namespace | None:
    """A namespace for a job's workers as `isolate` asks; None without one (then the note, once)."""
    global _exposure_told
    why = "isolate=False was given"
    if isolate is not False:
        try:
            return create()
        except IsolationUnavailable as err:
            if isolate:
                raise IsolationUnavailable(
                    f"isolate=True, but the workers cannot be isolated on this machine: {err}. "
                    "Pass isolate=None to run them anyway (a note says what that exposes)."
                ) from None
            why = str(err)
    if not _exposure_told:
        _exposure_told = True
        print(exposure_note(ports, why), flush=True)
    return None


def _hold() -> None:
    """The holder: bring loopback up, report the interfaces, wait for end-of-file on stdin."""
    import fcntl  # only here: there is none on Windows, where this module must still import

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
    names = sorted(name for _, name in socket.if_nameindex())
    print(_READY, *names, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    if sys.argv[1:] != ["hold"]:
        sys.exit("usage: python netns.py hold   (started by mgtutor's launcher, inside a new namespace)")
    _hold()
