"""The environment protocols, read from the envs' behaviour: Machado et al.'s sticky arm, and
one evaluation protocol (FIRE after a lost life) in both backends, on Breakout."""

import dataclasses
import importlib.util

import numpy as np
import pytest

from raylab import experiment as experiments
from raylab.config import from_dict
from trainers.dqn_softlinf.config import RAYLAB_ONLY, RLLIB_OFF, Config
from trainers.dqn_softlinf.envs import env_seed, make_envs
from trainers.dqn_softlinf.loop import play_games, td_done

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def experiment_config(name: str, **overrides) -> Config:
    return from_dict(Config, experiments.load(name).resolved_config() | overrides, name)


def as_rllib(cfg) -> Config:
    """The same protocol with backend rllib (the raylab loop's probes and settings off, as the
    config requires)."""
    defaults = {f.name: f.default for f in dataclasses.fields(Config) if f.name in RAYLAB_ONLY}
    return dataclasses.replace(cfg, backend="rllib", **RLLIB_OFF, **defaults)


def start_frames(cfg, seeds) -> set[bytes]:
    envs = make_envs(cfg, 4)
    frames = set()
    for seed in seeds:
        obs, _ = envs.reset(env_seed(0, 9, seed))
        frames |= {o[-1].tobytes() for o in obs}
    envs.close()
    return frames


def noop_lives(cfg, steps: int = 300) -> np.ndarray:
    """Lives of 4 Breakout envs after ``steps`` NOOPs from a reset."""
    envs = make_envs(cfg, 4)
    envs.reset(env_seed(0, 9))
    for _ in range(steps):
        envs.send(np.zeros(4, np.int64))
        *_, lives = envs.recv()
    envs.close()
    return lives


def test_sticky_arm_is_machados_recommended_protocol():
    pytest.importorskip("cv2")
    from trainers.dqn_softlinf.ale_probe import ALEProbeEnv

    sticky = experiment_config("dqn_softlinf_sticky", game="Breakout", num_envs=4, env_threads=1)
    cleanrl = experiment_config("dqn_softlinf", game="Breakout", num_envs=4, env_threads=1)
    # the full action set, in the training envs and the held-out probe's emulator
    envs = make_envs(sticky, 4)
    probe = ALEProbeEnv(sticky, 1)
    assert envs.num_actions == probe.num_actions == 18 and make_envs(cleanrl, 1).num_actions == 4
    # sticky actions 0.25, drawn per emulator frame (the probe draws them itself, ALE's are off)
    assert probe.sticky == 0.25 and probe.ale.getFloat("repeat_action_probability") == 0.0
    # no no-op starts: every reset starts on the same frame (CleanRL's no-op starts: many)
    same, varied = start_frames(sticky, range(3)), start_frames(cleanrl, range(3))
    print(f"\ndistinct start frames over 12 resets: sticky arm {len(same)}, CleanRL's {len(varied)}")
    assert len(same) == 1 and len(varied) > 3
    # no FIRE at reset: 300 NOOPs never serve Breakout's ball (CleanRL's arm serves it: lives lost)
    assert (noop_lives(sticky) == 5).all() and (noop_lives(cleanrl) < 5).all()
    # no FIRE after a lost life either, and a lost life is not terminal for the TD target
    assert envs.fire_action is None and probe.fire_action is None
    rng = np.random.default_rng(0)
    obs, lives = envs.reset(env_seed(0, 9))
    losses = 0
    for _ in range(3000):
        envs.send(rng.integers(0, 18, 4))
        _, _, term, trunc, next_lives = envs.recv()
        lost = (next_lives < lives) & (next_lives > 0) & ~(term | trunc)
        losses += int(lost.sum())
        assert not td_done(sticky, term, lost)[lost].any()
        assert td_done(cleanrl, term, lost)[lost].all()
        lives = next_lives
        if losses >= 4:
            break
    envs.close()
    assert losses >= 4  # lives were lost, and none of them ended the bootstrap
    # backend rllib builds the same protocol: 18 actions, no no-op starts, no FIRE wrapper
    if importlib.util.find_spec("ray.rllib") is not None:
        from trainers.dqn_softlinf.rllib_learner import EpisodicLife, FireAfterLifeLoss, _env_creator, dqn_config

        env = _env_creator(dqn_config(as_rllib(sticky)).env_config)
        assert env.action_space.n == 18 and env.unwrapped.ale.getFloat("repeat_action_probability") == 0.25
        layers = [env]
        while hasattr(layers[-1], "env"):
            layers.append(layers[-1].env)
        kinds = {type(layer).__name__ for layer in layers}
        assert not kinds & {"NoopResetEnv", "FireResetEnv", EpisodicLife.__name__, FireAfterLifeLoss.__name__}, kinds
        starts = {env.reset(seed=seed)[0].tobytes() for seed in range(3)}
        env.close()
        assert len(starts) == 1


def test_breakout_evaluation_presses_fire_after_a_lost_life_in_both_backends():
    pytest.importorskip("cv2")
    pytest.importorskip("ray.rllib")
    from trainers.dqn_softlinf.rllib_learner import _env_creator, dqn_config

    cfg = experiment_config("dqn_softlinf", game="Breakout", eval_max_steps=1000, env_threads=1)

    def noop(obs):
        return np.zeros(len(obs), np.int64)

    # raylab: NOOP play ends every game (5 lives lost, a FIRE serving each new ball) ...
    envs = make_envs(cfg, 4)
    returns, lengths = play_games(cfg, envs, noop, env_seed(0, 9))
    # ... and without the FIRE (positive control) the first lost life stalls the game
    envs.fire_action = None
    _, stalled = play_games(cfg, envs, noop, env_seed(0, 9))
    envs.close()
    # RLlib: the evaluation env exactly as the backend builds it
    eval_env_config = dqn_config(as_rllib(cfg)).evaluation_config["env_config"]
    env = _env_creator(eval_env_config)
    rllib_lengths, rllib_lost = [], []
    for game in range(4):
        env.reset(seed=game)
        lives, lost, steps, ended = env.unwrapped.ale.lives(), 0, 0, False
        while not ended:
            _, _, term, trunc, _ = env.step(0)
            steps += 1
            lost += int(env.unwrapped.ale.lives() < lives)
            lives, ended = env.unwrapped.ale.lives(), term or trunc
        rllib_lengths.append(steps)
        rllib_lost.append(lost)
    env.close()
    print(
        f"\nNOOP Breakout games, agent steps: raylab {lengths.tolist()}, raylab without FIRE "
        f"{stalled.tolist()}, RLlib {rllib_lengths} (lives lost {rllib_lost})"
    )
    assert (stalled == 1000).all()  # the instrument sees a stall
    assert (lengths < 400).all() and (np.array(rllib_lengths) < 400).all()
    assert rllib_lost == [5, 5, 5, 5]


def test_nature_arm_never_presses_fire():
    """The Lua DQN plays the agent's actions only (no FIRE at a reset or after a lost life):
    on Breakout, 300 NOOPs from a reset of the Nature arm's envs never serve the ball, while
    CleanRL's arm (FIRE at reset and after a lost life) loses lives to the same NOOPs."""
    pytest.importorskip("cv2")
    from trainers.dqn_softlinf.ale_probe import ALEProbeEnv

    nature = experiment_config("dqn_softlinf_nature", game="Breakout", num_envs=4, env_threads=1)
    cleanrl = experiment_config("dqn_softlinf", game="Breakout", num_envs=4, env_threads=1)
    assert make_envs(nature, 1).fire_action is None and ALEProbeEnv(nature, 1).fire_action is None
    assert (noop_lives(nature) == 5).all() and (noop_lives(cleanrl) < 5).all()
    assert nature.episodic_life  # a lost life still ends the TD target's bootstrap, as in the Lua code
