"""Reading the test bucket of the ``s3_server`` fixture (tests/scenarios/clusters/conftest.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from raylab.run_folder import CHECKPOINT_PREFIX, RESULT_FILE

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
"""The test S3 server's credentials (moto accepts any)."""


def keys(client, prefix: str = "") -> list[str]:
    """Every object key in the test bucket under ``prefix``."""
    found, token = [], None
    while True:
        page = client.list_objects_v2(Bucket="raylab", Prefix=prefix, **({"ContinuationToken": token} if token else {}))
        found += [o["Key"] for o in page.get("Contents", [])]
        token = page.get("NextContinuationToken")
        if not token:
            return found


def checkpoint_names(client, run: str) -> set[str]:
    """The checkpoint folders of a run's trials in the test bucket (``runs/RUN/TRIAL/checkpoint_*``)."""
    return {k.split("/")[3] for k in keys(client, f"runs/{run}/") if f"/{CHECKPOINT_PREFIX}" in k}


def result_rows(client, run: str) -> list[dict]:
    """The rows of the (one) trial's result.json of a run in the test bucket."""
    import json

    (key,) = [k for k in keys(client, f"runs/{run}/") if k.endswith(f"/{RESULT_FILE}")]
    text = client.get_object(Bucket="raylab", Key=key)["Body"].read().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass
class Writes:
    """What reached a moto server as writes: body bytes of every PUT (PutObject, UploadPart),
    by key, and the keys written by server-side copy (PUT with ``x-amz-copy-source``)."""

    put_bytes: dict[str, int] = field(default_factory=dict)
    copied_from: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    copy_limit: int | None = None
    """If set, a server-side copy of a source over this many bytes is refused as S3 refuses
    CopyObject over 5 GB (moto enforces no such limit): a scaled-down stand-in."""

    def bytes_under(self, prefix: str, part: str = "") -> int:
        """Body bytes PUT to keys under ``prefix`` whose key contains ``part``."""
        return sum(n for key, n in self.put_bytes.items() if key.startswith(prefix) and part in key)


def counting_app(app, writes: Writes):
    """A WSGI wrapper that records every PUT's body size by key (the path after the bucket)."""

    def wrapped(environ, start_response):
        if environ.get("REQUEST_METHOD") == "PUT":
            key = environ.get("PATH_INFO", "").lstrip("/").partition("/")[2]
            source = environ.get("HTTP_X_AMZ_COPY_SOURCE", "").lstrip("/").partition("/")[2]
            if source and writes.copy_limit is not None and writes.put_bytes.get(source, 0) > writes.copy_limit:
                start_response("400 Bad Request", [("Content-Type", "application/xml")])
                return [COPY_TOO_LARGE.format(limit=writes.copy_limit).encode()]
            size = int(environ.get("HTTP_X_AMZ_DECODED_CONTENT_LENGTH") or environ.get("CONTENT_LENGTH") or 0)
            with writes.lock:
                writes.put_bytes[key] = writes.put_bytes.get(key, 0) + size
                if source := environ.get("HTTP_X_AMZ_COPY_SOURCE"):
                    writes.copied_from[key] = source
        return app(environ, start_response)

    return wrapped


COPY_TOO_LARGE = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRequest</Code>'
    "<Message>The specified copy source is larger than the maximum allowable size "
    "for a copy source: {limit}</Message></Error>"
)
"""S3's answer to a CopyObject whose source is over the limit (5368709120 bytes on AWS)."""


def counting_moto_server(ip_address: str, port: int, writes: Writes):
    """moto's threaded S3 server, its app wrapped by ``counting_app``."""
    from moto.moto_server import threaded_moto_server as tms

    class Server(tms.ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = counting_app(tms.DomainDispatcherApplication(tms.create_backend_app), writes)
            self._server = tms.make_server(
                self._ip_address, self._port, app, True, request_handler=tms.MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return Server(ip_address=ip_address, port=port, verbose=False)


def checkpoint_writes(client, writes: Writes, run: str) -> dict:
    """How a run's checkpoints reached the bucket: the size of one (from the bucket's listing
    of the kept ones; all one size), how many Tune wrote, the body bytes PUT into Ray Train's
    run folder (``_raylab/train/``) and into the trial folders, the objects written by
    server-side copy, and the files of one checkpoint."""
    prefix = f"runs/{run}/"
    kept = [k for k in keys(client, prefix) if f"/{CHECKPOINT_PREFIX}" in k and "/_raylab/" not in k]
    sizes: dict[str, int] = {}
    for key in kept:
        folder = key.rsplit("/", 1)[0]
        sizes[folder] = sizes.get(folder, 0) + client.head_object(Bucket="raylab", Key=key)["ContentLength"]
    assert sizes and len(set(sizes.values())) == 1, sizes
    in_checkpoint = [
        k
        for k in writes.put_bytes
        if k.startswith(prefix) and f"/{CHECKPOINT_PREFIX}" in k and "checkpoint_manager_snapshot" not in k
    ]
    tune_keys = [k for k in in_checkpoint if "/_raylab/" not in k]
    return {
        "size": next(iter(sizes.values())),
        "count": len({k.rsplit("/", 1)[0] for k in tune_keys}),
        "train_bytes": sum(writes.put_bytes[k] for k in in_checkpoint if f"{prefix}_raylab/train/" in k),
        "tune_bytes": sum(writes.put_bytes[k] for k in tune_keys),
        "copied": sorted(k for k in writes.copied_from if k.startswith(prefix)),
        "tune_folders": {k.rsplit("/", 1)[0] for k in tune_keys},
        "files": len([k for k in kept if not k.endswith("/")]) // len(sizes),
    }
