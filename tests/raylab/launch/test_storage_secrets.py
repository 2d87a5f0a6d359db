"""Storage keys move from the environment into a private credentials file (no Ray started)."""

from __future__ import annotations

import os
import stat

import pytest

from raylab.launch import storage_secrets

boto3 = pytest.importorskip("boto3")

KEYS = {
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "secret/with+chars",
    "AWS_SESSION_TOKEN": "token",
    "AWS_REGION": "us-east-1",
    "AWS_ENDPOINT_URL_S3": "http://10.0.0.5:9000",
}


def test_the_worker_hook_leaves_no_key_in_the_environment_and_boto3_reads_the_file(tmp_path, monkeypatch):
    for key in storage_secrets.SECRET_ENV + ("AWS_PROFILE", storage_secrets.FILE_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    import ray.cloudpickle as cloudpickle  # how Ray ships the hook to each worker process

    hook = cloudpickle.loads(cloudpickle.dumps(storage_secrets.worker_hook(KEYS)))
    with monkeypatch.context() as inner:
        inner.setattr(os, "environ", dict(os.environ))
        hook()
        environ = os.environ
    assert not set(storage_secrets.SECRET_ENV) & set(environ)
    assert environ["AWS_REGION"] == "us-east-1" and environ["AWS_ENDPOINT_URL_S3"] == KEYS["AWS_ENDPOINT_URL_S3"]
    path = environ[storage_secrets.FILE_ENV]
    assert path.startswith(str(tmp_path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    # boto3's own credential chain, in this environment, finds the keys in the file.
    for key in ("AWS_PROFILE", storage_secrets.FILE_ENV):
        monkeypatch.setenv(key, environ[key])
    credentials = boto3.Session().get_credentials()
    assert (credentials.access_key, credentials.secret_key, credentials.token) == (
        "AKIAEXAMPLE",
        "secret/with+chars",
        "token",
    )


def test_one_file_per_set_of_keys_and_nothing_without_keys(tmp_path):
    first = storage_secrets.write_credentials_file(KEYS, str(tmp_path))
    assert storage_secrets.write_credentials_file(KEYS, str(tmp_path)) == first
    other = storage_secrets.write_credentials_file({**KEYS, "AWS_SESSION_TOKEN": "t2"}, str(tmp_path))
    assert other != first
    environ = {"AWS_REGION": "eu-west-1"}
    storage_secrets.use_credentials_file({}, environ)
    assert environ == {"AWS_REGION": "eu-west-1"}


@pytest.mark.parametrize("token_key", ["AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"])
def test_either_token_variable_becomes_the_session_token(token_key):
    text = storage_secrets.credentials_text({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", token_key: "t"})
    assert text == "[raylab]\naws_access_key_id = a\naws_secret_access_key = s\naws_session_token = t\n"


def test_a_run_that_hands_nothing_on_keeps_its_own_keys():
    """A local sweep or a dry run onto S3 hands no keys to a cluster (``secrets`` is empty): the
    driver's own keys stay in its environment, where its storage check and Tune read them."""
    environ = {**KEYS, "AWS_REGION": "eu-west-1"}
    storage_secrets.use_credentials_file({}, environ)
    assert environ == {**KEYS, "AWS_REGION": "eu-west-1"}
