"""Config validation, the preflight refusals, and every dqn_softlinf experiment file."""

import pytest

from raylab import experiment as experiments
from raylab.config import from_dict
from raylab.errors import UserError
from trainers.dqn_softlinf.config import RLLIB_OFF, Config
from trainers.dqn_softlinf.preflight import preflight, replay_bytes

EXPERIMENTS = [
    "dqn_softlinf",
    "dqn_softlinf_small",
    "dqn_softlinf_rllib",
    "dqn_softlinf_nature",
    "dqn_softlinf_sticky",
    "dqn_softlinf_target_period",
]


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("smoke", [False, True])
def test_experiment_files_validate(name, smoke):
    experiment = experiments.load(name, smoke=smoke)
    # the sticky arm is ranked as Machado et al. rank: the last 100 training games
    metric = "episode/return_mean" if name == "dqn_softlinf_sticky" else "eval/return_mean"
    assert experiment.workload == "dqn_softlinf" and experiment.metric == metric
    config = experiment.resolved_config()
    if smoke:
        assert experiment.resources.gpus_per_worker == 0 and experiment.resources.cpus_per_worker == 1
        assert config["total_steps"] <= 4000


def test_protocols_are_what_their_names_say():
    """CleanRL's dqn_atari.py defaults; Nature (Dopamine's dqn_nature.gin); the sticky arm."""
    cleanrl = from_dict(Config, experiments.load("dqn_softlinf").resolved_config(), "t")
    assert (cleanrl.optimizer, cleanrl.lr, cleanrl.target_period, cleanrl.learning_starts) == (
        "adam",
        1e-4,
        1000,
        80_000,
    )
    assert (cleanrl.epsilon_end, cleanrl.eval_epsilon, cleanrl.total_steps) == (0.01, 0.01, 10_000_000)
    nature = from_dict(Config, experiments.load("dqn_softlinf_nature").resolved_config(), "t")
    assert (nature.optimizer, nature.lr, nature.rmsprop_alpha, nature.rmsprop_centered) == (
        "rmsprop",
        2.5e-4,
        0.95,
        True,
    )
    assert (nature.target_period, nature.learning_starts, nature.total_steps) == (10_000, 50_000, 50_000_000)
    assert (nature.epsilon_end, nature.epsilon_fraction * nature.total_steps, nature.eval_epsilon) == (
        0.1,
        1_000_000,
        0.05,
    )
    assert (nature.rmsprop_eps, nature.loss_reduction, nature.epsilon_decay_start) == (0.01, "sum", 50_000)
    assert (nature.fire_reset, nature.episodic_life) == (False, True)  # the Lua DQN never presses FIRE
    sticky = from_dict(Config, experiments.load("dqn_softlinf_sticky").resolved_config(), "t")
    assert (sticky.sticky_action_prob, sticky.episodic_life) == (0.25, False)
    # Machado et al.'s budgets: 50M frames, the last-100-games figure also kept at 10M
    assert (sticky.total_steps * sticky.frame_skip, sticky.frame_marks) == (50_000_000, (10_000_000, 50_000_000))
    sweep = experiments.load("dqn_softlinf_target_period")
    assert list(sweep.search["target_period"].values()) == [[250, 1000, 4000, 10000]]


def test_nature_optimizer_is_rmsprop_with_eps_inside_the_root():
    import torch

    from trainers.dqn_softlinf.loop import make_optimizer
    from trainers.dqn_softlinf.optim import CenteredRMSprop

    nature = from_dict(Config, experiments.load("dqn_softlinf_nature").resolved_config(), "t")
    opt = make_optimizer(nature, torch.nn.Linear(2, 1).parameters())
    assert isinstance(opt, CenteredRMSprop) and nature.loss_reduction == "sum"
    group = opt.param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"], group["centered"]) == (2.5e-4, 0.95, 0.01, True)
    assert isinstance(make_optimizer(Config(), torch.nn.Linear(2, 1).parameters()), torch.optim.Adam)
    assert Config().loss_reduction == "mean"
    # the step itself against the Lua rule: test_dqn_nature.py


def test_paper_scale_defaults():
    cfg = Config()
    assert (cfg.total_steps, cfg.buffer_size, cfg.lr, cfg.target_period, cfg.train_every) == (
        10_000_000,
        1_000_000,
        1e-4,
        1000,
        4,
    )
    assert (cfg.learning_starts, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_fraction) == (80_000, 1.0, 0.01, 0.1)
    assert (cfg.batch_size, cfg.gamma, cfg.frame_skip, cfg.frame_stack, cfg.screen_size) == (32, 0.99, 4, 4, 84)
    total, per = replay_bytes(cfg)
    assert per == 7067 and 7.0e9 < total < 7.2e9  # 1M transitions (and the held-out probe): about 7 GB


@pytest.mark.parametrize(
    "values, key",
    [
        ({"beta": 0.0}, "beta"),
        ({"learning_starts": 20, "total_steps": 10}, "learning_starts"),
        ({"loss": "l3"}, "loss"),
        ({"gamma": 1.0}, "gamma"),
        ({"buffer_size": 16, "num_envs": 8}, "buffer_size"),
        ({"epsilon_end": 1.5}, "epsilon_end"),
        ({"frame_marks": [10_000]}, "frame_marks"),  # not on a report (multiples of 4 x 50,000 frames)
        ({"frame_marks": [80_000_000]}, "frame_marks"),  # beyond 10M agent steps = 40M frames
        ({"optimizer": "rmsprop"}, "rmsprop_eps"),  # Nature's 0.01 on a mean loss: a 32x smaller gradient
    ],
)
def test_invalid_values_name_their_key(values, key):
    with pytest.raises(UserError, match=key):
        from_dict(Config, values, "test.yaml", "config")


def test_preflight_refuses_a_replay_larger_than_memory():
    cfg = Config(buffer_size=1_000_000)
    with pytest.raises(UserError) as err:
        preflight(cfg, available=4 * 10**9)
    message = str(err.value)
    assert "buffer_size" in message and "1,000,000" in message and "7,067 bytes per transition" in message
    assert "7.20 GB" in message and "4.00 GB" in message  # the replay, the probes and the shared set
    fits = int(message.split("buffer_size <= ")[1].split(" ")[0].replace(",", ""))
    preflight(Config(buffer_size=fits), available=4 * 10**9)  # the suggested size passes
    preflight(cfg, available=64 * 10**9)


def test_preflight_refuses_unknown_games():
    with pytest.raises(UserError, match="'Pongg' is not an ALE game; valid names include pong, breakout"):
        preflight(Config(game="Pongg"), available=10**12)
    for game in ("Pong", "MsPacman", "space_invaders", "BeamRider"):
        preflight(Config(game=game), available=10**12)
    with pytest.raises(UserError, match="CartPole-v1"):
        preflight(Config(suite="gymnasium", game="CartPole-v7"), available=10**12)
    preflight(Config(suite="gymnasium", game="raylab/FeatureMDP-v0"), available=10**12)


def test_cli_refuses_before_starting_ray(capsys):
    import ray

    from raylab import tune as raylab_tune

    was_running = ray.is_initialized()
    assert raylab_tune.main(["dqn_softlinf", "--smoke", "config.buffer_size=100000000"]) == 2
    err = capsys.readouterr().err
    assert "config.buffer_size: 100,000,000 transitions need 706.7" in err
    assert raylab_tune.main(["dqn_softlinf", "--smoke", "config.game=Pongg"]) == 2
    assert "'Pongg' is not an ALE game" in capsys.readouterr().err
    assert ray.is_initialized() == was_running  # refused before Ray started


def test_preflight_names_opencv_when_the_heldout_probe_cannot_run(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now raises ImportError
    with pytest.raises(
        UserError,
        match=r"^dqn_softlinf needs cv2 \(OpenCV\) for the held-out probe \(config.heldout_size\): pip install \"raylab\[dqn_softlinf\]\", or set heldout_size: 0 and shared_states: 0$",
    ):
        preflight(Config(), available=10**12)
    with pytest.raises(UserError, match=r"for the held-out probe \(config.shared_states\)"):
        preflight(Config(heldout_size=0), available=10**12)
    preflight(Config(heldout_size=0, shared_states=0), available=10**12)
    preflight(Config(suite="gymnasium", game="CartPole-v1"), available=10**12)


def test_rllib_backend_refuses_the_nature_optimizer_it_would_ignore(capsys):
    from raylab import train as raylab_train

    assert raylab_train.main(["dqn_softlinf_nature", "config.backend=rllib"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "config.optimizer: backend rllib would ignore optimizer=rmsprop, loss_reduction=sum" in err
    with pytest.raises(UserError, match="config.adam_eps: backend rllib would ignore adam_eps=0.00015"):
        from_dict(Config, {"backend": "rllib", "adam_eps": 1.5e-4, **RLLIB_OFF}, "t.yaml", "config")
    rllib = from_dict(Config, experiments.load("dqn_softlinf_rllib").resolved_config(), "t")
    assert rllib.backend == "rllib"  # what RLlib does run passes


def test_rllib_backend_refuses_every_field_it_would_drop(capsys):
    """The sticky arm's expected-residual measurement is the raylab loop's: the dry run of
    ``dqn_softlinf_sticky config.backend=rllib`` exits 2 in one line naming the first dropped
    field; every field RLlib does not run is refused alone, naming itself."""
    from raylab import tune as raylab_tune

    assert raylab_tune.main(["dqn_softlinf_sticky", "--dry-run", "config.backend=rllib"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert (
        "command line: override 'config.backend=rllib': config.probe_size: backend rllib would ignore probe_size=512, "
        "heldout_size=4096, expected_states=512, expected_samples=16, shared_states=256, "
        "frame_marks=[10000000, 50000000], checkpoint_replay=true" in err
    ), err
    assert err.endswith(
        "use backend raylab, or set probe_size: 0, heldout_size: 0, expected_states: 0, "
        "expected_samples: 8, shared_states: 0, frame_marks: [], checkpoint_replay: false "
        f"(experiment {experiments.find('dqn_softlinf_sticky')})"
    ), err
    base = {"backend": "rllib", **RLLIB_OFF}
    from_dict(Config, base, "t.yaml", "config")  # RLlib's own settings pass
    dropped = {
        "amp_bf16": True,
        "compile": True,
        "checkpoint_replay": True,
        "probe_size": 64,
        "heldout_size": 64,
        "expected_states": 8,
        "expected_samples": 4,
        "shared_states": 8,
        "shared_seed": 1,
        "shared_stride": 2,
        "frame_marks": [200_000],
        "channels_last": False,
        "overlap_env": False,
        "env_threads": 2,
    }
    for key, value in dropped.items():
        with pytest.raises(UserError, match=rf"^t.yaml: config.{key}: backend rllib would ignore {key}="):
            from_dict(Config, base | {key: value}, "t.yaml", "config")
        from_dict(Config, base | {key: value, "backend": "raylab"}, "t.yaml", "config")  # the raylab loop runs it


def test_rmsprop_on_a_mean_loss_refuses_natures_epsilon():
    with pytest.raises(
        UserError,
        match=r"rmsprop_eps: 0.01 is Nature's epsilon for the summed batch gradient; "
        r"with loss_reduction: mean the gradient is 32x smaller .* set "
        r"loss_reduction: sum \(the Lua DQN's rule\) or rmsprop_eps: 9.77e-06",
    ):
        from_dict(Config, {"optimizer": "rmsprop"}, "t.yaml", "config")
    from_dict(Config, {"optimizer": "rmsprop", "loss_reduction": "sum"}, "t.yaml", "config")
    from_dict(Config, {"optimizer": "rmsprop", "rmsprop_eps": 1e-5}, "t.yaml", "config")  # Dopamine's form
