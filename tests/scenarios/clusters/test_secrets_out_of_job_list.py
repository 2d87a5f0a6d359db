"""Storage secrets reach a joined cluster's trials, and Ray's job and actor lists never show them.

A cluster whose processes were started without AWS variables (``fake_cluster`` with ``unset``)
runs ``python -m raylab.tune toy --smoke --address auto`` (one Ray Train trial of two workers)
with S3 storage on a moto server; only
the command has the keys. While the sweep runs, Ray's state API (what the dashboard's Jobs and
Actors pages read) is listed in full detail: jobs, actors, tasks, workers. None may hold the
secret key, the session token or the access key id, though the job's ``runtime_env`` is listed
(it names raylab's setup hook). The trials still reach S3 with the keys: the moto server records
which access key signed each request, and every request for the run's keys (the trials' own
checkpoints and ended markers among them) is signed with the command's. Controls: a driver that
passes a value in ``runtime_env.env_vars``, as raylab did before, shows it in the job list; an
unsigned request is recorded as unsigned. (Before ``raylab/launch/storage_secrets.py`` this test
found the keys in each trial actor's listed ``serialized_runtime_env``: Ray Tune copies them
there from the driver's environment, besides raylab's own ``env_vars``.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scenarios.clusters.conftest import CREDENTIALS, free_port
from scenarios.clusters.fake_cluster import fake_cluster

from raylab.run_folder import CHECKPOINT_PREFIX

# It starts Ray and runs a sweep (slow), about 2 minutes on 2 shared cores (long).
pytestmark = [pytest.mark.slow, pytest.mark.long]

ACCESS_KEY = "AKIARAYLABSECRETTEST"
SECRET = "raylab-secret-7Qx9-never-listed"
TOKEN = "raylab-token-3kd8-never-listed"
CONTROL = "raylab-control-value-in-env-vars"
SECRETS = (ACCESS_KEY, SECRET, TOKEN)
REPO = Path(__file__).resolve().parents[3]


def signing_moto_server(port: int, signed_by: list):
    """moto's threaded S3 server recording ``(method, path, access key id or None)`` per request."""
    from moto.moto_server import threaded_moto_server as tms

    def record(app):
        def wrapped(environ, start_response):
            found = re.search(r"Credential=([^/]+)/", environ.get("HTTP_AUTHORIZATION", ""))
            signed_by.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), found and found.group(1)))
            return app(environ, start_response)

        return wrapped

    class Server(tms.ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = record(tms.DomainDispatcherApplication(tms.create_backend_app))
            self._server = tms.make_server(
                self._ip_address, self._port, app, True, request_handler=tms.MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return Server(ip_address="127.0.0.1", port=port, verbose=False)


def state_listing(address: str) -> str:
    """Everything Ray's state API lists in detail about jobs, actors, tasks and workers."""
    from ray.util import state

    parts = []
    for lister in (state.list_jobs, state.list_actors, state.list_tasks, state.list_workers):
        kwargs = {} if lister is state.list_jobs else {"limit": 10000}
        items = lister(address=address, detail=True, raise_on_missing_output=False, **kwargs)
        parts.append(json.dumps([getattr(i, "__dict__", i) for i in items], default=str))
    return "\n".join(parts)


def test_secrets_reach_trials_but_not_rays_job_and_actor_lists(monkeypatch):
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    for key, value in CREDENTIALS.items():  # the test's own client: moto takes any keys
        monkeypatch.setenv(key, value)
    signed_by: list = []
    port = free_port()
    server = signing_moto_server(port, signed_by)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    unset = (*CREDENTIALS, "AWS_SESSION_TOKEN")
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="raylab")
        storage = f"s3://raylab/runs?endpoint_override={endpoint}&scheme=http"
        with fake_cluster(gpu_nodes=0, head_cpus=2, unset=unset) as cluster:
            # Control: a value passed the way raylab passed secrets before is in the job list.
            control = cluster.run(
                sys.executable,
                "-c",
                "import ray, time; ray.init(address='auto', logging_level='ERROR', "
                f"runtime_env={{'env_vars': {{'RAYLAB_CONTROL': '{CONTROL}'}}}}); time.sleep(1)",
                timeout=180,
            )
            assert control.returncode == 0, control.stderr[-2000:]
            assert CONTROL in state_listing(cluster.dashboard)

            cli_env = {**CREDENTIALS, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
            proc = subprocess.Popen(
                [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--address", "auto", "--quiet"]
                + ["--storage", storage, "--name", "secret"]
                # Ray Train trials: the Tune function (ImplicitFunc) writes the ended marker, the
                # Ray Train workers (RayTrainWorker) the checkpoints, each with the keys.
                + ["resources.workers=2", "search.seed=[0]"],
                env={**cluster.env, **cli_env, "AWS_SESSION_TOKEN": TOKEN},
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            listings, hook_listed = 0, False
            try:
                while proc.poll() is None:
                    try:
                        text = state_listing(cluster.dashboard)
                    except Exception:  # noqa: BLE001 - the state API between two answers
                        time.sleep(0.5)
                        continue
                    listings += 1
                    hook_listed |= "raylab_storage_credentials" in text
                    for secret in SECRETS:
                        at = text.find(secret)
                        assert at < 0, (
                            f"{secret} is listed by Ray's state API: ...{text[max(0, at - 600) : at + 200]}..."
                        )
                    time.sleep(2)
                out, _ = proc.communicate(timeout=60)
                final = state_listing(cluster.dashboard)  # the finished job and its dead actors
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        server.stop()
    assert proc.returncode == 0, out[-4000:]
    print(f"{listings} listings while the sweep ran; {len(signed_by)} S3 requests")
    assert listings >= 2 and hook_listed  # the job's runtime_env was listed: the hook's name, not the values
    for secret in SECRETS:
        assert secret not in final

    # The trials reached S3 with the command's keys: every request for the run's objects is signed with them.
    run_requests = [(m, path, key) for m, path, key in signed_by if path.startswith("/raylab/runs/secret")]
    ended = [r for r in run_requests if r[0] == "PUT" and "/_raylab/ended/" in r[1] and not r[1].endswith("/")]
    checkpoints = [r for r in run_requests if r[0] == "PUT" and f"/{CHECKPOINT_PREFIX}" in r[1]]
    assert len(ended) == 1 and checkpoints, run_requests  # the trial's own writes
    assert {key for _, _, key in run_requests} == {ACCESS_KEY}

    # Control of the instrument: an unsigned request is recorded as unsigned.
    from botocore import UNSIGNED
    from botocore.config import Config

    count = len(signed_by)
    server = signing_moto_server(port, signed_by)
    server.start()
    try:
        unsigned = boto3.client("s3", endpoint_url=endpoint, config=Config(signature_version=UNSIGNED))
        unsigned.list_buckets()
    finally:
        server.stop()
    assert signed_by[count:] and all(key is None for _, _, key in signed_by[count:])
