"""Checkpoints: atomic writes, corrupted ones detected and skipped, loading runs no code."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from raylab import checkpoint as ckpt
from raylab import session
from raylab.files import sha256_file
from raylab.run_folder import TrialFolder, checkpoint_name


def make_state(step: int) -> dict:
    return {"step": step, "weights": torch.arange(4.0) * step, "rng": ckpt.rng_state()}


def test_round_trip_and_rng_state(tmp_path):
    torch.manual_seed(3)
    state = make_state(7)
    ckpt.save(tmp_path / "c", state)
    expected = torch.rand(3)
    loaded = ckpt.load(tmp_path / "c")
    assert loaded["step"] == 7 and torch.equal(loaded["weights"], state["weights"])
    ckpt.set_rng_state(loaded["rng"])
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "no_meta", "no_state", "garbage_meta"])
def test_damaged_checkpoint_is_detected(tmp_path, damage):
    directory = ckpt.save(tmp_path / "c", make_state(1))
    state_file, meta_file = directory / ckpt.STATE_FILE, directory / ckpt.META_FILE
    data = state_file.read_bytes()
    if damage == "truncate":
        state_file.write_bytes(data[: len(data) // 2])
    elif damage == "flip_byte":
        state_file.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif damage == "no_meta":
        meta_file.unlink()
    elif damage == "no_state":
        state_file.unlink()
    else:
        meta_file.write_text("{not json")
    with pytest.raises(ckpt.CorruptCheckpoint, match=str(directory)):
        ckpt.load(directory)


def test_a_state_over_part_bytes_is_written_in_parts_and_loads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "PART_BYTES", 4096)
    state = {"replay": torch.arange(5000, dtype=torch.int32), "step": 3}
    directory = ckpt.save(tmp_path / "c", state)
    parts = sorted(directory.glob(ckpt.STATE_FILE + "*"))
    assert len(parts) > 4 and max(p.stat().st_size for p in parts) <= 4096
    assert sum(p.stat().st_size for p in parts) == json.loads((directory / ckpt.META_FILE).read_text())["bytes"]
    loaded = ckpt.load(directory)
    assert torch.equal(loaded["replay"], state["replay"]) and loaded["step"] == 3
    # A smaller state saved into the same folder leaves no part of the larger one behind.
    monkeypatch.setattr(ckpt, "PART_BYTES", 1 << 30)
    ckpt.save(directory, {"step": 4})
    assert [p.name for p in directory.glob(ckpt.STATE_FILE + "*")] == [ckpt.STATE_FILE]
    assert ckpt.load(directory)["step"] == 4


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "missing"])
def test_a_damaged_part_is_detected_and_named(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(ckpt, "PART_BYTES", 4096)
    directory = ckpt.save(tmp_path / "c", {"replay": torch.arange(5000, dtype=torch.int32)})
    part = directory / f"{ckpt.STATE_FILE}.part2"
    data = part.read_bytes()
    if damage == "truncate":
        part.write_bytes(data[:-1])
    elif damage == "flip_byte":
        part.write_bytes(data[:10] + bytes([data[10] ^ 0xFF]) + data[11:])
    else:
        part.unlink()
    named = "part2" if damage != "flip_byte" else "checksum"
    with pytest.raises(ckpt.CorruptCheckpoint, match=named):
        ckpt.load(directory)


def test_crash_while_writing_leaves_previous_checkpoint_as_latest(tmp_path, monkeypatch):
    trial = TrialFolder.at(tmp_path / "trial")
    ckpt.save(trial.checkpoint_path(1), make_state(1))
    real_replace = os.replace

    def crash(src, dst):
        if str(dst).endswith(ckpt.STATE_FILE):
            raise OSError("simulated crash during write")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        ckpt.save(trial.checkpoint_path(2), make_state(2))
    monkeypatch.setattr(os, "replace", real_replace)
    session.start(backend="local", trial=trial)
    with pytest.warns(UserWarning, match=checkpoint_name(2)):
        state = session.restore()
    assert state["step"] == 1


def test_restore_skips_a_corrupted_latest_and_names_it(tmp_path):
    trial = TrialFolder.at(tmp_path / "trial")
    for step in (1, 2, 3):
        ckpt.save(trial.checkpoint_path(step), make_state(step))
    latest = trial.checkpoint_path(3) / ckpt.STATE_FILE
    latest.write_bytes(latest.read_bytes()[:-10])
    session.start(backend="local", trial=trial)
    with pytest.warns(UserWarning, match=rf"{checkpoint_name(3)}.*truncated"):
        assert session.restore()["step"] == 2


def test_siblings_fallback_order(tmp_path):
    for step in (0, 1, 2, 10):
        (tmp_path / checkpoint_name(step)).mkdir()
    order = ckpt.siblings_newest_first(tmp_path / checkpoint_name(2))
    assert [p.name for p in order] == [checkpoint_name(2), checkpoint_name(1), checkpoint_name(0)]


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = Path("/tmp/raylab-checkpoint-exploit-marker")


def test_loading_never_runs_code_from_the_file(tmp_path):
    MARKER.unlink(missing_ok=True)
    directory = ckpt.save(tmp_path / "c", make_state(1))
    payload = pickle.dumps({"step": _Exploit()})
    torch.save({"step": 1}, directory / ckpt.STATE_FILE)  # a real torch zip file...
    # ...whose pickle is replaced by a malicious one, with a matching checksum in meta.json.
    import zipfile

    with zipfile.ZipFile(directory / ckpt.STATE_FILE) as zf:
        names = zf.namelist()
        members = {n: zf.read(n) for n in names}
    pkl = next(n for n in names if n.endswith("data.pkl"))
    members[pkl] = payload
    with zipfile.ZipFile(directory / ckpt.STATE_FILE, "w") as zf:
        for name in names:
            zf.writestr(name, members[name])
    meta = {"sha256": sha256_file(directory / ckpt.STATE_FILE), "bytes": (directory / ckpt.STATE_FILE).stat().st_size}
    (directory / ckpt.META_FILE).write_text(__import__("json").dumps(meta))
    with pytest.raises(ckpt.CorruptCheckpoint, match="cannot load"):
        ckpt.load(directory)
    assert not MARKER.exists()
