"""Reading the test bucket of the ``s3_server`` fixture (tests/cluster/conftest.py)."""

from __future__ import annotations


def keys(client, prefix: str = "") -> list[str]:
    """Every object key in the test bucket under ``prefix``."""
    found, token = [], None
    while True:
        page = client.list_objects_v2(
            Bucket="raylab", Prefix=prefix, **({"ContinuationToken": token} if token else {})
        )
        found += [o["Key"] for o in page.get("Contents", [])]
        token = page.get("NextContinuationToken")
        if not token:
            return found




def checkpoint_names(client, run: str) -> set[str]:
    """The checkpoint folders of a run's trials in the test bucket (``runs/RUN/TRIAL/checkpoint_*``)."""
    return {k.split("/")[3] for k in keys(client, f"runs/{run}/") if "/checkpoint_" in k}


def result_rows(client, run: str) -> list[dict]:
    """The rows of the (one) trial's result.json of a run in the test bucket."""
    import json

    (key,) = [k for k in keys(client, f"runs/{run}/") if k.endswith("/result.json")]
    text = client.get_object(Bucket="raylab", Key=key)["Body"].read().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
