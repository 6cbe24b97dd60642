"""mgtutor.classroom.datakit: the classroom data kit, against a web server on localhost (no internet here).

The server holds MNIST's official t10k files (from MGTUTOR_DATA_DIR; their published checksums
must pass), its training files cut to a prefix, and the CIFAR-10 subset archive under the official
name: the last two must be refused, by name, with the expected checksum, and leave nothing behind.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mgtutor.classroom import datakit
from tests.conftest import ROOT

DATA = Path(os.environ.get("MGTUTOR_DATA_DIR", "")) if os.environ.get("MGTUTOR_DATA_DIR") else None
needs_data = pytest.mark.skipif(
    DATA is None or not (DATA / "mnist-subset").is_dir(), reason="MGTUTOR_DATA_DIR with mnist-subset/ not set"
)
CIFAR = datakit.ARCHIVES["cifar10"][0]
TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS = datakit.ARCHIVES["mnist"]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    served = tmp_path_factory.mktemp("mirror")
    for name in (TRAIN_IMAGES.name, TRAIN_LABELS.name, TEST_IMAGES.name, TEST_LABELS.name):
        shutil.copy(DATA / "mnist-subset" / name, served / name)
    shutil.copy(DATA / "cifar-10-python-subset.tar.gz", served / CIFAR.name)
    handler = functools.partial(_Quiet, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", served
    server.shutdown()
    server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@needs_data
def test_official_files_pass_and_others_are_refused_by_name_with_nothing_left(mirror, tmp_path):
    url, _ = mirror
    kit = tmp_path / "kit"
    with pytest.raises(datakit.DataKitError) as refused:
        datakit.download(kit, ["mnist", "cifar10"], mirror=url)
    message = str(refused.value)
    for bad in (TRAIN_IMAGES, TRAIN_LABELS, CIFAR):  # prefixes and a subset: not the published files
        assert bad.name in message and f"expected sha256 {bad.sha256}" in message
    assert TEST_IMAGES.name not in message and TEST_LABELS.name not in message
    # Only the verified files, under their final names; no temp files.
    assert sorted(p.name for p in kit.iterdir()) == sorted([TEST_IMAGES.name, TEST_LABELS.name])
    assert datakit.sha256_of(kit / TEST_IMAGES.name) == TEST_IMAGES.sha256
    # A second run finds them intact and does not fetch them again.
    with pytest.raises(datakit.DataKitError):
        datakit.download(kit, ["mnist"], mirror=url)


@needs_data
def test_already_there_and_verify_report_each_file(mirror, tmp_path):
    url, served = mirror
    kit = tmp_path / "kit"
    kit.mkdir()
    shutil.copy(served / TEST_IMAGES.name, kit / TEST_IMAGES.name)
    (kit / TEST_LABELS.name).write_bytes((served / TEST_LABELS.name).read_bytes()[:100])  # a partial copy
    with pytest.raises(datakit.DataKitError) as failed:
        datakit.verify(kit, ["mnist"])
    message = str(failed.value)
    assert f"{TEST_LABELS.name} ({kit / TEST_LABELS.name}): sha256" in message and "100 bytes" in message
    assert f"{TRAIN_IMAGES.name}: missing from {kit}" in message
    assert TEST_IMAGES.name not in message
    # The partial file is replaced by the served (official) one; the intact one is kept.
    with pytest.raises(datakit.DataKitError):
        datakit.download(kit, ["mnist"], mirror=url)
    assert datakit.sha256_of(kit / TEST_LABELS.name) == TEST_LABELS.sha256


@needs_data
def test_the_command_line_exits_1_naming_the_file_and_2_on_bad_flags(mirror, tmp_path):
    url, _ = mirror
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = functools.partial(subprocess.run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    done = run([sys.executable, "-m", "mgtutor.classroom.datakit", "download", "--to", str(tmp_path / "kit"),
                "--datasets", "cifar10", "--mirror", url])  # fmt: skip
    assert done.returncode == 1
    assert CIFAR.name in done.stderr and CIFAR.sha256 in done.stderr
    a_file = tmp_path / "file"
    a_file.write_text("x")
    done = run([sys.executable, "-m", "mgtutor.classroom.datakit", "download", "--to", str(a_file)])
    assert done.returncode == 2 and "--to" in done.stderr and "is a file" in done.stderr
    done = run([sys.executable, "-m", "mgtutor.classroom.datakit", "verify"])
    assert done.returncode == 2 and "--in" in done.stderr


def test_bad_arguments_are_refused_before_any_download(tmp_path):
    with pytest.raises(ValueError, match="datasets must be some of cifar10, mnist"):
        datakit.download(tmp_path / "kit", ["imagenet"])
    assert not (tmp_path / "kit").exists()


@needs_data
def test_a_kit_folder_is_what_load_dataset_reads(tmp_path, monkeypatch):
    # The layout download leaves: the official names side by side in one folder.
    kit = tmp_path / "kit"
    kit.mkdir()
    for name in (TRAIN_IMAGES.name, TRAIN_LABELS.name, TEST_IMAGES.name, TEST_LABELS.name):
        shutil.copy(DATA / "mnist-subset" / name, kit / name)
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(kit))
    from mgtutor.data import load_dataset

    data = load_dataset("mnist", synthetic_fallback=False)
    assert data.x_test.shape == (10_000, 28, 28, 1) and not data.synthetic
