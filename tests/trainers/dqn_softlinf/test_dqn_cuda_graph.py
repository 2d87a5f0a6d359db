"""GraphedStep's control flow, on a CPU with torch.cuda's graph calls stood in for: 3 eager
warm-up steps on a side stream, the generators registered before the capture begins, one
capture, replays after it, one real step per call; a failed capture warns once, restores the
stream and runs eagerly from then on. (The capture itself needs a GPU: the device check.)"""

from __future__ import annotations

import contextlib

import pytest
import torch

from trainers.dqn_softlinf import cuda_graph


class FakeCuda:
    def __init__(self, fail: bool = False):
        self.fail, self.capturing = fail, False
        self.log: list[str] = []

    def install(self, monkeypatch):
        fake = self

        class Graph:
            def register_generator_state(self, gen):
                assert not fake.capturing
                fake.log.append("register")

            def replay(self):
                fake.log.append("replay")
                fake.run()

        @contextlib.contextmanager
        def graph(g, capture_error_mode="global"):
            assert capture_error_mode == "thread_local"
            fake.capturing = True
            fake.log.append("capture")
            try:
                yield
                if fake.fail:
                    raise RuntimeError("operation not permitted when stream is capturing\nmore")
            finally:
                fake.capturing = False

        @contextlib.contextmanager
        def stream(s):
            fake.log.append("side")
            yield

        class Stream:
            def wait_stream(self, other):
                pass

        for name, value in {
            "CUDAGraph": Graph,
            "graph": graph,
            "stream": stream,
            "Stream": Stream,
            "current_stream": lambda: Stream(),
            "synchronize": lambda: None,
            "set_stream": lambda s: fake.log.append("restored"),
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)

    def run(self):  # what the step does when its kernels execute
        self.log.append("step")


@pytest.mark.parametrize("fail", [False, True])
def test_warm_up_capture_replay_and_the_fallback(fail, monkeypatch, capsys):
    fake = FakeCuda(fail)
    fake.install(monkeypatch)

    def step():  # during a capture kernels are recorded, not run
        fake.log.append("recorded" if fake.capturing else "step")

    graphed = cuda_graph.GraphedStep(step, generators=(object(),), name="DQN update")
    for _ in range(6):
        graphed()
    steps = fake.log.count("step")
    assert steps == 6  # one real step per call, whatever the path
    assert fake.log[:6] == ["side", "step"] * 3  # 3 warm-ups on the side stream
    assert fake.log[6:9] == ["register", "capture", "recorded"]
    err = capsys.readouterr().err
    if fail:
        assert graphed.eager and graphed.graph is None and "restored" in fake.log
        assert (
            err.count("\n") == 1
            and "CUDA graph capture of the DQN update failed (RuntimeError: "
            "operation not permitted when stream is capturing); running it eagerly"
            in err
        )
        assert "replay" not in fake.log
    else:
        assert not graphed.eager and err == ""
        assert fake.log[9:] == ["replay", "step"] * 3


def test_a_load_state_dict_or_an_lr_change_drops_the_graph_and_captures_again(monkeypatch):
    """The optimizer's state tensors are replaced by ``load_state_dict``, and a learning rate is
    baked into a recorded kernel: either resets the graph, whose next calls warm up (3) and
    capture again; the calls between replay nothing stale."""
    fake = FakeCuda()
    fake.install(monkeypatch)
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)

    def step():
        fake.log.append("recorded" if fake.capturing else "step")

    graphed = cuda_graph.GraphedStep(
        step, name="DQN update", optimizers=(opt,), signature=lambda: tuple(g["lr"] for g in opt.param_groups)
    )
    for _ in range(5):
        graphed()
    assert graphed.replaying and graphed.captures == 1
    opt.load_state_dict(opt.state_dict())  # as a restore does
    assert not graphed.replaying and graphed.calls == 0
    fake.log.clear()
    for _ in range(5):
        graphed()
    assert fake.log == ["side", "step"] * 3 + ["capture", "recorded", "replay", "step"] * 1 + ["replay", "step"]
    assert graphed.captures == 2 and graphed.replaying
    opt.param_groups[0]["lr"] = 0.05  # a schedule's change: the next call warms up again
    fake.log.clear()
    graphed()
    assert fake.log == ["side", "step"] and graphed.captures == 2 and not graphed.replaying


def test_a_failed_capture_is_an_error_under_the_strict_switch(monkeypatch):
    fake = FakeCuda(fail=True)
    fake.install(monkeypatch)
    monkeypatch.setenv(cuda_graph.STRICT_ENV, "1")
    graphed = cuda_graph.GraphedStep(lambda: None, name="DQN update")
    for _ in range(3):
        graphed()
    with pytest.raises(cuda_graph.CaptureFailed, match="RAYLAB_CUDA_GRAPH_STRICT=1 forbids running it eagerly"):
        graphed()


@pytest.mark.parametrize("plant", ["", "item", "fault"])
def test_the_simulated_capture_refuses_what_a_graph_cannot_hold(plant, monkeypatch, capsys):
    """Without CUDA (the device rehearsal) the capture call runs the step under a mode that
    raises on a device read; the planted fault fails every capture. Positive controls: a
    planted ``.item()`` and the fault, each warned about, then an error under the strict switch."""
    if plant == "fault":
        monkeypatch.setenv(cuda_graph.FAULT_ENV, "1")
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([w], lr=0.1, fused=True)
    calls = []

    def step():
        loss = (w * 2).square().sum()
        if plant == "item":
            loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        calls.append(1)

    graphed = cuda_graph.GraphedStep(step, name="DQN update", optimizers=(opt,), simulated=True)
    for _ in range(6):
        graphed()
    err = capsys.readouterr().err
    if not plant:
        assert graphed.replaying and len(calls) == 6 and err == ""
        return
    assert not graphed.replaying and graphed.eager and "CUDA graph capture of the DQN update failed" in err
    assert ("_local_scalar_dense" in err) if plant == "item" else ("planted" in err)
    # the planted fault stops the capture before the step: that call's step runs eagerly; a
    # refused read stops the step part-way, and the rehearsal does not run it again
    assert len(calls) == (5 if plant == "item" else 6)
    monkeypatch.setenv(cuda_graph.STRICT_ENV, "1")
    graphed.reset()
    with pytest.raises(cuda_graph.CaptureFailed):
        for _ in range(4):
            graphed()


def small_pong(**extra) -> dict:
    return {
        "game": "Pong",
        "total_steps": 96,
        "learning_starts": 32,
        "buffer_size": 1000,
        "num_envs": 4,
        "batch_size": 8,
        "report_every": 48,
        "eval_episodes": 1,
        "eval_max_steps": 1,
        "eval_every": 10**6,
        "heldout_size": 0,
        "shared_states": 0,
        "probe_size": 16,
        "max_episode_frames": 400,
        "env_threads": 1,
        "replay_on_device": True,
        "cuda_graph": True,
        **extra,
    }


def test_the_loop_reports_whether_its_update_replays_a_graph(monkeypatch, one_thread):
    """On a simulated GPU machine the Pong loop's update is captured (simulated) and replayed:
    ``perf/cuda_graph`` 1 at each report after the capture; with a planted capture failure it is
    0, and under the strict switch the trial fails instead. ``perf/autocast_bf16`` says whether
    the update's forward ran in bfloat16 (amp_bf16 on, then off)."""
    from raylab import session
    from trainers.dqn_softlinf import loop

    monkeypatch.setenv("RAYLAB_SIMULATED_GPUS", "1")
    history = session.start(backend="local").history
    loop.train_loop(small_pong(amp_bf16=True))
    assert [r["perf/cuda_graph"] for r in history] == [1.0, 1.0], history
    assert [r["perf/autocast_bf16"] for r in history] == [1.0, 1.0]  # the update's forward ran in bf16
    monkeypatch.setenv(cuda_graph.FAULT_ENV, "1")
    history = session.start(backend="local").history
    loop.train_loop(small_pong())
    assert [r["perf/cuda_graph"] for r in history] == [0.0, 0.0]
    assert [r["perf/autocast_bf16"] for r in history] == [0.0, 0.0]
    monkeypatch.setenv(cuda_graph.STRICT_ENV, "1")
    session.start(backend="local")
    with pytest.raises(cuda_graph.CaptureFailed, match="planted"):
        loop.train_loop(small_pong())


def test_the_held_out_game_stepped_in_its_own_thread_records_the_same_transitions(monkeypatch, one_thread):
    """The held-out game's emulator steps beside the update (its action chosen in the training
    thread): every held-out figure and the training loss equal the inline loop's, bit for bit
    (the replay on the device: one packed copy per vector step)."""
    from raylab import session
    from trainers.dqn_softlinf import loop

    config = small_pong(
        total_steps=64, learning_starts=16, report_every=32, heldout_size=64, expected_states=4, expected_samples=2
    )
    config["cuda_graph"] = False
    rows = {}
    for threaded in (True, False):
        monkeypatch.setattr(loop, "HELDOUT_THREAD", threaded)
        history = session.start(backend="local").history
        loop.train_loop(config)
        rows[threaded] = history
    keys = [k for k in rows[False][-1] if "heldout" in k or "expected" in k]
    assert "bellman/residual_linf_heldout" in keys and len(rows[True]) == len(rows[False]) == 2
    for a, b in zip(rows[True], rows[False]):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        assert a["train/loss"] == b["train/loss"]
