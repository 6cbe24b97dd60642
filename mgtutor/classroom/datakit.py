"""The classroom data kit: fetch the official CIFAR-10 and MNIST archives once, check them anywhere.

    python -m mgtutor.classroom.datakit download --to DIR [--datasets cifar10 mnist] [--mirror URL]
    python -m mgtutor.classroom.datakit verify --in DIR

Every file is checked against its published sha256 before it gets its final name.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mgtutor.support.files import atomic_write

CHUNK = 1 << 20


@dataclass(frozen=True)
class Archive:
    name: str
    base_url: str
    sha256: str
    size: int


ARCHIVES: dict[str, tuple[Archive, ...]] = {
    "cifar10": (
        Archive("cifar-10-python.tar.gz", "https://www.cs.toronto.edu/~kriz/",
                "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", 170_498_071),
    ),
    "mnist": tuple(
        Archive(name, "https://storage.googleapis.com/cvdf-datasets/mnist/", sha, size)
        for name, sha, size in (
            ("train-images-idx3-ubyte.gz", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
             9_912_422),
            ("train-labels-idx1-ubyte.gz", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
             28_881),
            ("t10k-images-idx3-ubyte.gz", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
             1_648_877),
            ("t10k-labels-idx1-ubyte.gz", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
             4_542),
        )
    ),
}  # fmt: skip


class DataKitError(RuntimeError):
    """One or more archives are missing or are not the published file."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _mismatch(archive: Archive, where: str, actual: str, size: int) -> str:
    return (
        f"{archive.name} ({where}): sha256 {actual}, {size:,} bytes; expected sha256 {archive.sha256}, "
        f"{archive.size:,} bytes. A partial download or another file: delete it and download again "
        "(python -m mgtutor.classroom.datakit download --to DIR), or copy the folder again from the "
        "teacher's copy."
    )


def _check_datasets(datasets: Sequence[str]) -> list[str]:
    if isinstance(datasets, str) or not datasets or any(d not in ARCHIVES for d in datasets):
        raise ValueError(f"datasets must be some of {', '.join(ARCHIVES)}; got {datasets!r}.")
    return list(dict.fromkeys(datasets))


def _check_folder(folder: str | os.PathLike, flag: str) -> Path:
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file; give the folder to keep the archives in.")
    return path


def download(to: str | os.PathLike, datasets: Sequence[str] = ("cifar10", "mnist"), *,
             mirror: str | None = None) -> list[str]:  # fmt: skip
    """Fetch each archive into `to` unless it is already there intact; verify before renaming.

    `mirror` replaces the official addresses (a base URL holding the same file names). Returns
    one line per file; raises `DataKitError` naming every file that failed, after trying all.
    """
    folder = _check_folder(to, "--to")
    chosen = _check_datasets(datasets)
    mirror = mirror or os.environ.get("MGTUTOR_DATA_MIRROR") or None
    folder.mkdir(parents=True, exist_ok=True)
    lines, failures = [], []
    for archive in (a for d in chosen for a in ARCHIVES[d]):
        target = folder / archive.name
        if target.is_file() and sha256_of(target) == archive.sha256:
            lines.append(f"{archive.name}: already there, checksum ok")
            continue
        url = (mirror.rstrip("/") + "/" if mirror else archive.base_url) + archive.name
        try:
            lines.append(_fetch(archive, url, target))
        except (OSError, DataKitError) as err:
            failures.append(str(err) if isinstance(err, DataKitError) else f"{archive.name}: {url}: {err}")
    if failures:
        raise DataKitError("\n".join(failures))
    return lines


def _fetch(archive: Archive, url: str, target: Path) -> str:
    digest, size = hashlib.sha256(), 0
    with atomic_write(target) as temp:
        with urllib.request.urlopen(url, timeout=60) as response, open(temp, "wb") as out:
            for block in iter(lambda: response.read(CHUNK), b""):
                digest.update(block)
                size += len(block)
                out.write(block)
        if digest.hexdigest() != archive.sha256:
            raise DataKitError(_mismatch(archive, f"downloaded from {url}", digest.hexdigest(), size))
    return f"{archive.name}: downloaded {size:,} bytes, checksum ok"


def verify(folder: str | os.PathLike, datasets: Sequence[str] = ("cifar10", "mnist")) -> list[str]:
    """Check a copied folder: every archive present with its published sha256, or `DataKitError`."""
    path = _check_folder(folder, "--in")
    lines, failures = [], []
    for archive in (a for d in _check_datasets(datasets) for a in ARCHIVES[d]):
        target = path / archive.name
        if not target.is_file():
            failures.append(f"{archive.name}: missing from {path}; copy it from the teacher's folder.")
        elif (actual := sha256_of(target)) != archive.sha256:
            failures.append(_mismatch(archive, str(target), actual, target.stat().st_size))
        else:
            lines.append(f"{archive.name}: checksum ok")
    if failures:
        raise DataKitError("\n".join(failures))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mgtutor.classroom.datakit", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser("download", help="fetch the official archives into a folder")
    get.add_argument("--to", required=True, type=Path, help="the folder to keep them in")
    get.add_argument("--mirror", help="a base URL with the same file names (default: the official sites)")
    check = commands.add_parser("verify", help="check a copied folder against the published checksums")
    check.add_argument("--in", dest="folder", required=True, type=Path, help="the folder to check")
    for sub in (get, check):
        sub.add_argument("--datasets", nargs="+", default=list(ARCHIVES), choices=list(ARCHIVES))
    args = parser.parse_args(argv)
    try:
        if args.command == "download":
            lines = download(args.to, args.datasets, mirror=args.mirror)
        else:
            lines = verify(args.folder, args.datasets)
    except ValueError as err:
        parser.error(str(err))
    except DataKitError as err:
        print(f"error:\n{err}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    folder = args.to if args.command == "download" else args.folder
    print(f"ok: set MGTUTOR_DATA_DIR={folder.resolve()} on each laptop")
    return 0


if __name__ == "__main__":  # python -m mgtutor.classroom.datakit download --to DIR / verify --in DIR
    sys.exit(main())
