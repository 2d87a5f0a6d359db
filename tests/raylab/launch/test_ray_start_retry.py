"""A local Ray whose node times out during startup (a loaded machine) is started once more; a
second timeout is one line, exit code 2, naming the cause."""

import pytest

from raylab.errors import UserError
from raylab.launch import ray_start

TIMEOUT = Exception(
    "The current node timed out during startup. This could happen because some of "
    "the raylet failed to startup or the GCS has become overloaded."
)


class FakeRay:
    """ray.init raising Ray's startup timeout ``failures`` times, then starting; counts shutdowns."""

    def __init__(self, failures: int):
        self.failures, self.calls, self.shutdowns = failures, 0, 0

    def init(self, **kwargs):
        self.calls += 1
        if self.calls <= self.failures:
            raise TIMEOUT
        return "context"

    def shutdown(self):
        self.shutdowns += 1


@pytest.fixture
def fake_ray(monkeypatch):
    import ray

    def install(failures: int) -> FakeRay:
        fake = FakeRay(failures)
        monkeypatch.setattr(ray, "init", fake.init)
        monkeypatch.setattr(ray, "shutdown", fake.shutdown)
        return fake

    return install


def test_a_startup_timeout_is_retried_once(fake_ray, capsys):
    fake = fake_ray(1)
    assert ray_start.init_local_retrying(address="local") == "context"
    assert (fake.calls, fake.shutdowns) == (2, 1)  # the failed attempt's processes were stopped
    assert "timed out during startup; starting it once more" in capsys.readouterr().err


def test_a_second_timeout_is_one_line_naming_the_cause(fake_ray):
    fake = fake_ray(2)
    with pytest.raises(UserError) as err:
        ray_start.init_local_retrying(address="local")
    assert fake.calls == 2
    message = str(err.value)
    assert "\n" not in message and "timed out during startup twice" in message and "overloaded" in message


def test_other_start_errors_are_not_retried(fake_ray, monkeypatch):
    import ray

    def broken(**kwargs):
        raise ValueError("bad argument")

    monkeypatch.setattr(ray, "init", broken)
    with pytest.raises(ValueError, match="bad argument"):
        ray_start.init_local_retrying(address="local")


def test_the_cli_exits_2_in_one_line(fake_ray, monkeypatch, capsys, tmp_path):
    import ray

    from raylab import tune as raylab_tune

    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process: connect() would not start one")
    fake_ray(2)
    assert raylab_tune.main(["toy", "--smoke", "--storage", str(tmp_path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "starting it once more" not in line]
    assert len(lines) == 1 and "timed out during startup twice" in lines[0] and "Traceback" not in lines[0]
