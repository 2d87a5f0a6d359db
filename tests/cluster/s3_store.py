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


