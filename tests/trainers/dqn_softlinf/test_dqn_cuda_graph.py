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
