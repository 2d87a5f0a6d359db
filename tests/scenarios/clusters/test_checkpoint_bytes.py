"""The S3 server that counts the bytes PUT by key (``tests/scenarios/clusters/s3_store.Writes``), which
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


def test_a_checkpoint_over_the_copy_limit_reaches_the_trial_folder_in_parts(counting_s3_server, tmp_path, monkeypatch):
    """Tune copies a Train checkpoint into the trial folder with Ray's own copy (one server-side
    CopyObject per file), and S3 refuses CopyObject over 5 GB. Scaled down on the counting server
    (copy limit 256 KiB): a single-file state of 1 MiB fails that copy (the control), the same
    state saved in parts of at most ``PART_BYTES`` is copied and loads back equal."""
    import pyarrow.fs
    import pytest
    import torch
    from ray.train._internal.storage import _pyarrow_fs_copy_files

    from raylab import checkpoint as ckpt

    storage, client, writes = counting_s3_server
    fs, root = pyarrow.fs.FileSystem.from_uri(storage)
    writes.copy_limit = 256 * 1024
    state = {"replay": torch.randint(0, 255, (1 << 20,), dtype=torch.uint8), "step": 7}

    def upload_and_copy(name: str) -> str:
        local = tmp_path / name
        ckpt.save(local, state)
        train = f"{root}/_raylab/train/{name}"
        _pyarrow_fs_copy_files(str(local), train, destination_filesystem=fs)  # the Train worker's upload
        _pyarrow_fs_copy_files(
            train, f"{root}/{name}", source_filesystem=fs, destination_filesystem=fs
        )  # Tune's copy into the trial folder
        return f"{root}/{name}"

    with pytest.raises(OSError, match="larger than the maximum allowable size"):
        upload_and_copy("checkpoint_single")

    monkeypatch.setattr(ckpt, "PART_BYTES", 256 * 1024)
    copied = upload_and_copy("checkpoint_parts")
    back = tmp_path / "restored"
    back.mkdir()
    _pyarrow_fs_copy_files(copied, str(back), source_filesystem=fs)
    loaded = ckpt.load(back)
    assert torch.equal(loaded["replay"], state["replay"]) and loaded["step"] == 7
    sizes = {k: n for k, n in writes.put_bytes.items() if "/checkpoint_parts/state.pt" in k}
    assert len(sizes) == 2 * 5  # 5 parts (1 MiB and the pickle's headers), uploaded then copied
    assert max(sizes.values()) <= 256 * 1024, sizes
    assert {k for k in writes.copied_from if "checkpoint_parts/state" in k} == {
        k for k in sizes if "/_raylab/" not in k
    }  # every part server-side copied
