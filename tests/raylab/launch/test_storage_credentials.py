"""A storage URI that carries keys is refused in one line, and the keys appear nowhere.

A planted secret goes into ``--storage`` (userinfo, query keys, an endpoint's userinfo) of each
command that takes a storage location; each exits 2 with one line, and the secret is searched
for in stdout, stderr and every file the command left under its working folder and home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raylab.errors import UserError
from raylab.files import refuse_credentials

REPO = Path(__file__).resolve().parents[3]
SECRET = "pLaNtEdSeCrEt/x+y9Q"
KEY_ID = "AKIAPLANTEDKEYID0000"

URIS = [
    f"s3://{KEY_ID}:{SECRET}@bucket/runs",
    f"s3://{KEY_ID}@bucket/runs?secret_key={SECRET}",
    f"s3://bucket/runs?access_key={KEY_ID}&secret_key={SECRET}",
    f"s3://bucket/runs?endpoint_override=http://{KEY_ID}:{SECRET}@10.0.0.5:9000",
    f"gs://{KEY_ID}:{SECRET}@bucket/runs",
]


@pytest.mark.parametrize("uri", URIS)
def test_refusal_names_the_place_never_the_value(uri):
    with pytest.raises(UserError) as err:
        refuse_credentials(uri)
    text = str(err.value)
    assert SECRET not in text and KEY_ID not in text and "\n" not in text
    assert "environment, a profile or a role" in text


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/runs",
        "s3://bucket/runs@v2/x",  # an @ in an object key is not userinfo
        "s3://bucket/runs?endpoint_override=http://10.0.0.5:9000&scheme=http",
        "results",
        "/tmp/a:b@c",
        "file:///tmp/runs",
    ],
)
def test_uris_without_credentials_pass(uri):
    refuse_credentials(uri)


COMMANDS = {
    "tune": ["-m", "raylab.tune", "toy", "--smoke", "--dry-run", "--storage"],
    "tune-run": ["-m", "raylab.tune", "toy", "--smoke", "--storage"],
    "train": ["-m", "raylab.train", "toy", "--smoke", "--storage"],
    "report": ["-m", "raylab.report", "toy", "--storage"],
    "stage": ["-m", "raylab.data.stage", "cifar10"],
    "data_dir": [
        "-m",
        "raylab.tune",
        "fair_adv",
        "--dry-run",
        "--cluster",
        str(REPO / "cluster" / "gpu.yaml"),
        "config.data_dir=",
    ],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_planted_secret_is_refused_and_appears_in_no_output_and_no_file(command, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "PYTHONPATH": str(REPO),
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "RAY_ADDRESS": "",
    }
    argv = (
        COMMANDS[command][:-1] + [COMMANDS[command][-1] + URIS[0]]
        if command == "data_dir"
        else [*COMMANDS[command], URIS[0]]
    )
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "environment, a profile or a role" in errors[0], proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert SECRET not in stream and KEY_ID not in stream
    holders = []
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if SECRET.encode() in data or KEY_ID.encode() in data:
                holders.append(str(path))
    assert holders == []


def test_redacted_hides_userinfo_and_credential_query_values_and_keeps_the_rest():
    from raylab.files import redacted

    assert redacted(f"config.data_dir=s3://KEYID0000:{SECRET}@bucket/runs") == "config.data_dir=s3://***@bucket/runs"
    assert (
        redacted("s3://b/r?access_key=AK&Secret_Key=SK&region=x") == "s3://b/r?access_key=***&Secret_Key=***&region=x"
    )
    assert redacted("config.data_dir=/tmp/a:b@c") == "config.data_dir=/tmp/a:b@c"  # a path, not a URI
