"""Storage keys for a joined cluster's trials, kept out of Ray's job and actor lists.

Ray lists every job's and actor's ``runtime_env`` (``ray list jobs --detail``, ``ray list
actors --detail``, the dashboard's Jobs and Actors pages), its ``env_vars`` in full. Two things
put AWS keys there: a ``runtime_env.env_vars`` that carries them, and Ray Tune itself, which
copies ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SECURITY_TOKEN`` and
``AWS_SESSION_TOKEN`` from the driver's environment into each trial actor's ``env_vars``
(``ray/tune/execution/class_cache.py``). So on a joined cluster the driver moves its keys from
its environment into a credentials file (mode 0600, in a folder of mode 0700) that
``AWS_SHARED_CREDENTIALS_FILE`` names, where boto3 and the AWS SDK under pyarrow's S3 find
them; and each worker process of the job writes the same file on its own node and points at it,
through the job's ``worker_process_setup_hook``, which Ray stores in its internal key-value
store and lists only by name. The file stays on each node after the sweep (a private temp
folder, one file per set of keys); a ``ray up`` cluster's nodes use their instance profile and
get no file at all (the head's shell has no keys to hand on).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
"""The variables that hold AWS keys; the others raylab hands on (region, endpoint) are not secret."""
FILE_ENV = "AWS_SHARED_CREDENTIALS_FILE"
PROFILE = "raylab"
"""The credentials file's one profile (``AWS_PROFILE`` names it where the file is used)."""


def credentials_text(values: dict[str, str]) -> str:
    """The AWS credentials-file text of ``values``' keys, as profile ``PROFILE``."""
    names = {
        "AWS_ACCESS_KEY_ID": "aws_access_key_id",
        "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
        "AWS_SESSION_TOKEN": "aws_session_token",
    }
    token = values.get("AWS_SESSION_TOKEN") or values.get("AWS_SECURITY_TOKEN")
    keys = {**values, **({"AWS_SESSION_TOKEN": token} if token else {})}
    lines = [f"[{PROFILE}]"] + [f"{name} = {keys[key]}" for key, name in names.items() if keys.get(key)]
    return "\n".join(lines) + "\n"


def write_credentials_file(values: dict[str, str], folder: str | None = None) -> str:
    """Write ``values``' keys to a credentials file readable by this user only and return its
    path: ``FOLDER/raylab-credentials-UID/SHA`` (``FOLDER``: the temp folder), one file per set
    of keys, written atomically (several worker processes of a node write the same file)."""
    text = credentials_text(values)
    home = Path(folder or tempfile.gettempdir()) / f"raylab-credentials-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    path = home / hashlib.sha256(text.encode()).hexdigest()[:16]
    if not path.exists():
        fd, partial = tempfile.mkstemp(dir=home)  # mode 0600
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(partial, path)
    return str(path)


def use_credentials_file(values: dict[str, str], environ: dict | None = None) -> None:
    """Move ``values`` into this process's environment with the keys in a credentials file:
    the non-secret ones (region, endpoint) as they are, the keys through ``FILE_ENV`` and
    ``AWS_PROFILE``, and no secret variable left in the environment."""
    environ = os.environ if environ is None else environ
    secret = {k: v for k, v in values.items() if k in SECRET_ENV}
    environ.update({k: v for k, v in values.items() if k not in SECRET_ENV})
    if not secret:
        return  # nothing to move: the environment's own keys, if any, stay where they are
    environ[FILE_ENV] = write_credentials_file(secret)
    environ["AWS_PROFILE"] = PROFILE
    for key in SECRET_ENV:
        environ.pop(key, None)


def worker_hook(values: dict[str, str]):
    """The job's ``worker_process_setup_hook``: ``use_credentials_file(values)`` in each worker
    process the job starts, on every node, before its first task."""
    values = dict(values)

    def raylab_storage_credentials() -> None:
        from raylab.launch.storage_secrets import use_credentials_file

        use_credentials_file(values)

    return raylab_storage_credentials


EXPIRY_ENV = ("AWS_CREDENTIAL_EXPIRATION", "AWS_SESSION_EXPIRATION")
"""Where the tools that hand out temporary keys (``aws configure export-credentials --format
env``, aws-vault, SSO helpers) say when they expire, as an ISO 8601 time."""


def token_lifetime_warning(environ: dict, hours: float | None, what: str, now=None) -> str:
    """A warning when ``environ`` holds a session token (temporary keys) that expires before
    ``hours`` from now (``what`` names that duration), or whose expiry is not stated: the keys
    are copied to the nodes once and never refreshed, so every checkpoint after they expire
    fails. "" without a session token, or when it outlives ``hours``. Roles (an instance
    profile, IRSA, Pod Identity) refresh themselves and need none of this."""
    import datetime

    if not (environ.get("AWS_SESSION_TOKEN") or environ.get("AWS_SECURITY_TOKEN")):
        return ""
    roles = "give the nodes a role instead (instance profile, IRSA or Pod Identity), which refreshes itself"
    stated = next((environ[k] for k in EXPIRY_ENV if environ.get(k)), "")
    try:
        expiry = datetime.datetime.fromisoformat(stated.replace("Z", "+00:00"))
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return (
            "warning: AWS_SESSION_TOKEN holds temporary keys of unstated lifetime; they are copied to the "
            f"nodes once and never refreshed, so checkpoints fail once they expire; {roles}"
        )
    now = now or datetime.datetime.now(datetime.timezone.utc)
    left = (expiry - now).total_seconds() / 3600
    if hours is None or left >= hours:
        return ""
    return (
        f"warning: the session token (AWS_SESSION_TOKEN) expires in {_duration(left)}, before {what} of "
        f"{_duration(hours)}; checkpoints after that fail (the keys are copied to the nodes once, never "
        f"refreshed); {roles}"
    )


def _duration(hours: float) -> str:
    if hours <= 0:
        return "0 min (it has expired)"
    return f"{hours * 60:,.0f} min" if hours < 1 else f"{hours:,.1f} h"
