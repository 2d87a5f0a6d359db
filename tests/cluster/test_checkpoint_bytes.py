"""The S3 server that counts the bytes PUT by key (``tests/cluster/s3_store.Writes``), which
``test_s3_storage.py``'s Ray Train sweep uses to measure bytes per checkpoint: its control."""

from __future__ import annotations

import os


def test_the_counting_server_counts_what_pyarrow_puts(counting_s3_server):
    """Positive control: known sizes, one small PutObject and one multipart upload."""
    import pyarrow.fs

    storage, _, writes = counting_s3_server
    fs, path = pyarrow.fs.FileSystem.from_uri(storage)
    for size in (1000, 12 * 1024**2):
        with fs.open_output_stream(f"{path}/f{size}") as out:
            out.write(os.urandom(size))
    assert writes.put_bytes["runs/f1000"] == 1000
    assert writes.put_bytes[f"runs/f{12 * 1024**2}"] == 12 * 1024**2
    fs.copy_file(f"{path}/f1000", f"{path}/g1000")  # server-side: no body bytes
    assert writes.put_bytes["runs/g1000"] == 0 and writes.copied_from["runs/g1000"] == "raylab/runs/f1000"
