"""The image workloads' speed switches (``amp_bf16``, ``channels_last``, ``compile``): ``auto``
follows the trial's device, and ``--dry-run`` says what it resolves to for the experiment."""

from __future__ import annotations

import pytest
import torch

from raylab import tune as raylab_tune
from raylab.accel import enabled


def test_enabled_follows_the_device():
    assert enabled("auto", torch.device("cuda")) and enabled("auto", "cuda:1")
    assert not enabled("auto", torch.device("cpu"))
    assert enabled(True, "cpu") and not enabled(False, "cuda")
    with pytest.raises(ValueError, match="true, false or 'auto'"):
        enabled("on", "cuda")


@pytest.mark.parametrize("name", ["backdoor", "fair_adv"])
def test_dry_run_says_what_auto_resolves_to(name, capsys):
    assert raylab_tune.main([name, "--dry-run"]) == 2  # this machine has no GPU for it
    out = capsys.readouterr().out
    assert all(
        f"{key}: {value}" in out
        for key, value in (("amp_bf16", "auto"), ("channels_last", "auto"), ("compile", "false"))
    )
    assert "# amp_bf16, channels_last: auto -> on: each trial reserves a GPU (CUDA)" in out
    # the smoke run reserves no GPU: the same file trains at float32 there
    assert raylab_tune.main([name, "--smoke", "--dry-run"]) == 0
    assert "# amp_bf16, channels_last: auto -> off: the trials reserve no GPU (CPU)" in capsys.readouterr().out
    # a pinned switch is not auto any more
    assert raylab_tune.main([name, "config.amp_bf16=false", "--dry-run"]) == 2
    out = capsys.readouterr().out
    assert "# channels_last: auto -> on" in out and "amp_bf16: false" in out


def test_a_wrong_switch_value_is_one_line(capsys):
    assert raylab_tune.main(["fair_adv", "config.channels_last=fast", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "error: command line: override 'config.channels_last=fast': "
        "config.channels_last: expected bool | 'auto', got 'fast' (str)"
    )
    assert len(err.splitlines()) == 1
