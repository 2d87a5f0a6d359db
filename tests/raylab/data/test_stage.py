"""The one-time CIFAR staging step (``python -m raylab.data.stage``): it downloads the archive
once from a file server (here one on 127.0.0.1 serving a CIFAR-format tarball built in the test;
no internet here), into a folder or a URI, and trials read the staged copy without downloading."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from raylab.data import node_copy, stage
from raylab.data.cifar import SPECS, load_cifar, write_synthetic_cifar

ARCHIVE = SPECS["cifar10"].archive
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def server(tmp_path):
    """A file server on 127.0.0.1 serving a synthetic CIFAR-10 archive; yields (url, md5, gets)."""
    source = tmp_path / "served"
    archive = write_synthetic_cifar(source, "cifar10", n_train=300, n_test=100, seed=0)
    (source / (ARCHIVE + ".md5")).unlink()  # serve the archive alone, as a mirror would
    gets: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):
            gets.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(source)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/{ARCHIVE}"
        yield url, hashlib.md5(archive.read_bytes()).hexdigest(), gets
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_stage_downloads_once_and_every_trial_reads_the_staged_copy(server, tmp_path, local_trial):
    url, md5, gets = server
    dest = tmp_path / "staged"
    command = [sys.executable, "-m", "raylab.data.stage", "cifar10", str(dest), "--url", url, "--md5", md5]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"staged: {dest / ARCHIVE}" in done.stdout and f"config.data_dir={dest}" in done.stdout
    assert hashlib.md5((dest / ARCHIVE).read_bytes()).hexdigest() == md5
    assert (dest / (ARCHIVE + ".md5")).read_text().split() == [md5, ARCHIVE]  # the mirror's checksum
    assert gets == [f"/{ARCHIVE}"]
    assert stage.main(["cifar10", str(dest), "--url", url, "--md5", md5]) == 0  # again: nothing fetched
    assert gets == [f"/{ARCHIVE}"]
    # a fair_adv trial reads the staged copy with download off: no request reaches the server
    rows = local_trial(
        "fair_adv",
        "config.synthetic_data=false",
        f"config.data_dir={dest}",
        "config.download=false",
        "config.method=pgd_at",
        "config.epochs=1",
        "config.autoattack='off'",
        "config.final_eval_last=false",
        stop={"train/epoch": 1},
    )
    assert rows[-1]["train/epoch"] == 1
    assert gets == [f"/{ARCHIVE}"]


def test_stage_to_a_uri_is_copied_once_per_node(server, tmp_path, monkeypatch):
    """A URI destination (the run's storage; file:// here, as s3:// goes through the same
    pyarrow filesystem calls): each node copies the archive into its cache once and reads it."""
    url, md5, gets = server
    uri = f"file://{tmp_path / 'storage' / 'cifar'}"
    assert stage.main(["cifar10", uri, "--url", url, "--md5", md5]) == 0
    monkeypatch.setenv(node_copy.CACHE_ENV, str(tmp_path / "node-cache"))
    data = load_cifar("cifar10", uri)
    assert data.train_x.shape == (300, 3, 32, 32) and data.test_x.shape == (100, 3, 32, 32)
    copies = list((tmp_path / "node-cache").rglob(ARCHIVE))
    assert len(copies) == 1 and hashlib.md5(copies[0].read_bytes()).hexdigest() == md5
    before = copies[0].stat().st_mtime_ns
    load_cifar("cifar10", uri)  # a second trial on the node reads the same copy
    assert copies[0].stat().st_mtime_ns == before and gets == [f"/{ARCHIVE}"]


def test_stage_refuses_bad_input_in_one_line(server, tmp_path, capsys):
    url, md5, _ = server
    assert stage.main(["cifar10", str(tmp_path / "a"), "--url", url]) == 2  # the published MD5 does not match
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and url in err and "expected c58f30108f718f92721af3b95e74349a" in err
    assert not (tmp_path / "a" / ARCHIVE).exists()
    assert stage.main(["imagenet", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "imagenet" in err and "cifar10" in err
    dead = url.rsplit("/", 1)[0] + "/missing.tar.gz"
    assert stage.main(["cifar10", str(tmp_path / "c"), "--url", dead, "--md5", md5]) == 2
    assert dead in capsys.readouterr().err


@pytest.mark.parametrize("name", ["fair_adv", "fair_adv_long", "fair_adv_tri"])
def test_cifar_presets_read_a_staged_copy_and_name_the_stage_command_without_one(name, tmp_path):
    """The CIFAR presets never download in a trial (download: false): without a staged archive
    their preflight stops before Ray starts with one line naming the staging command."""
    from raylab import experiment as experiments
    from raylab.errors import UserError
    from raylab.launch import checks

    loaded = experiments.load(name, [f"config.data_dir={tmp_path / 'empty'}"])
    assert loaded.resolved_config()["download"] is False
    with pytest.raises(UserError) as err:
        checks.preflight(loaded)
    assert f"python -m raylab.data.stage cifar10 {tmp_path / 'empty'}" in str(err.value)
    assert "\n" not in str(err.value)
