"""``--dashboard``: the printed URL and token advice get a browser past Ray's token prompt to the
running trial's actors; the local Ray listens on 127.0.0.1 only (the dashboard and every other
server of the CLI's process tree: GCS, raylet, workers); ``--keep`` keeps it
up after the sweep until Ctrl-C. The screenshot is kept in ``test-output/`` (or
``$RAYLAB_TEST_OUTPUT``) for a person to look at."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from raylab.run_folder import RunFolder

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(os.environ.get("RAYLAB_TEST_OUTPUT", REPO / "test-output"))


def wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        assert proc.poll() is None, f"the sweep ended before {what}"
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listening_beyond_loopback(root_pid: int) -> list[str]:
    """Every listening socket of ``root_pid`` and its descendants not bound to loopback."""
    import psutil

    root = psutil.Process(root_pid)
    found = []
    for process in [root, *root.children(recursive=True)]:
        try:
            sockets = process.net_connections(kind="inet")
            name = process.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found += [
            f"{name} (pid {process.pid}) on {c.laddr.ip}:{c.laddr.port}"
            for c in sockets
            if c.status == psutil.CONN_LISTEN and c.laddr.ip not in LOOPBACK
        ]
    return found


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which(CHROMIUM) is None,
    reason=f"{CHROMIUM} is absent (Debian's chromium package; make chromium installs it)",
)
def test_dashboard_opens_in_chromium_shows_the_trial_actors_and_stays_with_keep(tmp_path):
    import psutil
    from playwright.sync_api import sync_playwright

    err_path = tmp_path / "stderr.txt"
    release = tmp_path / "release"  # the trials are held after their first report until the page was read
    with err_path.open("w") as err_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "raylab.tune",
                "toy",
                "--smoke",
                "config.hold_at_step=20",
                f"config.release_file={release}",
                "--dashboard",
                "--keep",
                "--storage",
                str(tmp_path / "results"),
                "--name",
                "d",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            start_new_session=True,
        )
    try:
        url = wait_for(
            lambda: (re.search(r"Ray dashboard: (http://\S+)", err_path.read_text()) or [None, None])[1],
            120,
            "the dashboard URL",
            proc,
        )
        advice = err_path.read_text()
        port = int(url.rsplit(":", 1)[1])
        listening = {
            c.laddr.ip
            for c in psutil.net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
        assert listening == {"127.0.0.1"}, listening
        open_to_all = listening_beyond_loopback(proc.pid)
        assert not open_to_all, open_to_all
        token = None
        if status_of(f"{url}/api/version") == 401:  # Ray asks for its token: the CLI said how
            assert "ray get-auth-token" in advice, advice
            token = (
                subprocess.run(
                    [str(Path(sys.executable).parent / "ray"), "get-auth-token"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
        wait_for(
            lambda: any(trial.rows() for trial in RunFolder(tmp_path / "results" / "d").trials()),
            120,
            "the first trial to report",
            proc,
        )

        shot = OUTPUT / "dashboard_actors.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                if token:  # what the dashboard's token prompt does with a pasted token
                    answer = context.request.post(
                        f"{url}/api/authenticate", headers={"Authorization": f"Bearer {token}"}
                    )
                    assert answer.ok, answer.status
                page = context.new_page()
                page.goto(f"{url}/#/actors", wait_until="load")
                page.get_by_text("ImplicitFunc", exact=False).first.wait_for(timeout=60_000)
                body = page.inner_text("body")
                page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
                release.touch()
        assert "Authentication Token Required" not in body
        assert "ALIVE" in body and "ImplicitFunc" in body, body[:2000]  # Tune's trial actor

        wait_for(lambda: "press Ctrl-C" in err_path.read_text(), 240, "the sweep to end", proc)
        assert status_of(f"{url}/api/version") in (200, 401)  # still up after the sweep
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "TERMINATED" in out, (out, err_path.read_text()[-2000:])
    finally:
        release.touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
