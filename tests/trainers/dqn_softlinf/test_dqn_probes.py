"""The measurements: exact Bellman quantities on FeatureMDP, the held-out probe's emulator copy,
and the expected residual (K redrawn successors) against the one-sample figure."""

import numpy as np
import pytest
import torch

from trainers.dqn_softlinf.ale_probe import ALEProbeEnv, life_lost
from trainers.dqn_softlinf.config import Config
from trainers.dqn_softlinf.envs import MAX_ENVS, env_seed
from trainers.dqn_softlinf.exact import bellman_operator, exact_metrics, optimal_q, policy_value
from trainers.dqn_softlinf.feature_mdp import FeatureMDP


def test_exact_quantities_on_a_two_state_mdp_by_hand():
    # state 0 -a0-> 0 (r 1) or -a1-> 1 (r 0); state 1 -any-> 1 (r 2). gamma 0.5, c 0.8: g = 0.4
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = P[0, 1, 1] = P[1, 0, 1] = P[1, 1, 1] = 1.0
    R = np.array([[1.0, 0.0], [2.0, 2.0]])
    g = 0.5 * 0.8
    v1 = 2.0 / (1 - g)  # 3.333...
    v0 = max(1.0 / (1 - g), g * v1)  # stay: 1.667, move: 1.333 -> stay
    q_star = np.array([[1 + g * v0, g * v1], [2 + g * v1, 2 + g * v1]])
    np.testing.assert_allclose(optimal_q(P, R, 0.5, 0.8), q_star, atol=1e-10)
    np.testing.assert_allclose(bellman_operator(np.zeros((2, 2)), P, R, 0.5, 0.8), R)
    np.testing.assert_allclose(policy_value(np.array([1, 0]), P, R, 0.5, 0.8), [g * v1, v1])
    m = exact_metrics(q_star, P, R, 0.5, 0.8)
    assert m["bellman/residual_linf_exact"] < 1e-9 and m["bellman/qstar_dist_linf"] < 1e-9
    assert m["bellman/greedy_value_gap_exact"] == pytest.approx(0.0, abs=1e-9)
    q = q_star.copy()
    q[0, 1] += 1.0  # now greedy moves in state 0: value g v1 instead of v0
    m = exact_metrics(q, P, R, 0.5, 0.8)
    assert m["bellman/residual_linf_exact"] == pytest.approx(1.0)
    assert m["bellman/qstar_dist_linf"] == pytest.approx(1.0)
    assert m["bellman/greedy_value_gap_exact"] == pytest.approx((v0 - g * v1) / 2)


def test_feature_mdp_model_matches_its_sampled_transitions():
    env = FeatureMDP()
    P, R, c = env.exact_model()
    np.testing.assert_allclose(P.sum(-1), 1.0)
    assert c == pytest.approx(0.95)
    env.reset(seed=0)
    counts = np.zeros(env.num_states)
    for _ in range(6000):
        env.state = 3
        _, reward, *_ = env.step(1)
        assert reward == pytest.approx(R[3, 1])
        counts[env.state] += 1
    np.testing.assert_allclose(counts / counts.sum(), P[3, 1], atol=0.03)


def test_env_seed_blocks_never_overlap_across_trial_seeds():
    bases = [env_seed(seed, stream, i) for seed in range(20) for stream in range(5) for i in range(3)]
    assert len(set(bases)) == len(bases)
    assert all(b % MAX_ENVS == 0 and 0 <= b < 2**30 for b in bases)


def test_life_loss_ignores_the_zero_lives_sentinel():
    lives, after = np.array([3, 3, 1, 2]), np.array([2, 3, 0, 0])
    np.testing.assert_array_equal(life_lost(lives, after), [True, False, False, False])


def test_probe_env_frames_equal_the_training_envs():
    from ale_py.vector_env import AtariVectorEnv

    cfg = Config(game="Breakout", noop_max=0, fire_reset=False)
    vector = AtariVectorEnv(
        "breakout", 1, num_threads=1, noop_max=0, use_fire_reset=False, reward_clipping=False, autoreset_mode="NextStep"
    )
    obs, info = vector.reset(seed=1)
    probe = ALEProbeEnv(cfg, seed=1)
    stack, lives = probe.reset()
    np.testing.assert_array_equal(stack, obs[0])
    rng = np.random.default_rng(0)
    for _ in range(150):
        a = int(rng.integers(probe.num_actions))
        vector.send(np.array([a], np.int32))
        obs, reward, term, trunc, info = vector.recv()
        stack, r, t, _, lives = probe.step(a)
        if term[0]:
            break
        np.testing.assert_array_equal(stack, obs[0])
        assert r == reward[0] and lives == info["lives"][0] and t == term[0]
    vector.close()


def test_probe_resets_reach_the_training_envs_start_frames():
    """Breakout with training's reset (FIRE, then no-ops drawn from 0..29 frames): the
    held-out probe's resets and the training envs' reach the same set of start frames."""
    from trainers.dqn_softlinf.envs import make_envs

    cfg = Config(game="Breakout", env_threads=1)  # noop_max 30, fire_reset on
    envs = make_envs(cfg, 8)
    envs.reset(env_seed(0, 11))  # seeded once; unseeded resets draw on without reloading the ROM
    training = {o[-1].tobytes() for _ in range(40) for o in envs.env.reset()[0]}
    envs.close()
    probe = ALEProbeEnv(cfg, seed=5)
    heldout = {probe.reset()[0][-1].tobytes() for _ in range(320)}
    print(
        f"\ndistinct start frames in 320 resets: training {len(training)}, held-out probe "
        f"{len(heldout)}, shared {len(training & heldout)}"
    )
    assert len(training) > 10 and heldout == training


def _heldout_residuals(sticky: float):
    from trainers.dqn_softlinf.heldout import HeldoutProbe
    from trainers.dqn_softlinf.model import NatureCNN

    cfg = Config(game="Pong", sticky_action_prob=sticky, heldout_size=200, expected_states=48, expected_samples=4)
    torch.manual_seed(0)
    net = NatureCNN(4, 6).eval()
    probe = HeldoutProbe(cfg, seed=3)
    for _ in range(220):
        probe.step(lambda o: net(torch.from_numpy(o)).argmax(1).numpy(), epsilon=0.5)
    assert len(probe) >= 200  # the ring keeps heldout_size transitions (and a few more rows)
    with torch.no_grad():
        return probe.residuals(net, 0.99, torch.device("cpu")), probe.metrics(net, 0.99, torch.device("cpu"))


def test_expected_residual_equals_the_one_sample_figure_without_sticky_actions(one_thread):
    r, m = _heldout_residuals(0.0)
    assert r["target_std"].max().item() == 0.0  # a deterministic emulator: K equal successors
    torch.testing.assert_close(r["expected"], r["sampled"][r["pick"]], rtol=1e-5, atol=1e-6)
    assert m["bellman/residual_linf_expected"] == pytest.approx(m["bellman/residual_linf_sampled_subset"], rel=1e-5)


def test_expected_residual_differs_from_the_one_sample_figure_with_sticky_actions(one_thread):
    r, m = _heldout_residuals(0.25)
    differs = (r["expected"] - r["sampled"][r["pick"]]).abs() > 1e-6
    assert (r["target_std"] > 0).float().mean() > 0.2 and differs.float().mean() > 0.2, r
    assert m["bellman/target_std_expected"] > 0


def test_expected_residual_bias_bound_against_the_exact_value_on_feature_mdp():
    """``max_i |Q_i - mean_k y_ik|`` over all m = 72 (state, action) pairs of FeatureMDP, the
    K = 8 targets drawn by stepping the env, against the exact ``max_i |Q_i - TQ_i|``. It is
    biased upward by at most ``E max_i |e_i| <= sqrt(2 ln 2m) max_i std(y_i) / sqrt(K)``
    (heldout.py); at Q = Q* (exact residual 0) the estimate is all bias, and that bias is
    several times one ``std(y) / sqrt(K)``, the bound documented before."""
    env = FeatureMDP()
    env.reset(seed=0)
    P, R, c = env.exact_model()
    gamma, k, reps = 0.9, 8, 60
    q_star = optimal_q(P, R, gamma, c)
    pairs = [(s, a) for s in range(env.num_states) for a in range(R.shape[1])]

    def targets(q, s, a) -> np.ndarray:  # K sampled TD targets r + gamma (1 - d) max_a' Q(s', a')
        out = []
        for _ in range(k):
            env.state, env.steps = s, 0
            _, r, term, _, _ = env.step(a)
            out.append(r + gamma * (1 - term) * q[env.state].max())
        return np.array(out)

    rng = np.random.default_rng(1)
    multiples = {}
    for name, q in (("Q*", q_star), ("Q* + noise", q_star + rng.normal(0, 0.5, q_star.shape))):
        exact = float(np.abs(q - bellman_operator(q, P, R, gamma, c)).max())
        m1, m2 = P @ q.max(1), P @ q.max(1) ** 2  # E[max Q(s')], E[max Q(s')^2] per (s, a)
        std_y = gamma * np.sqrt(c * m2 - (c * m1) ** 2)  # y's std: successor and termination
        estimates = np.array([max(abs(q[s, a] - targets(q, s, a).mean()) for s, a in pairs) for _ in range(reps)])
        bias, se = estimates.mean() - exact, estimates.std(ddof=1) / np.sqrt(reps)
        bound = np.sqrt(2 * np.log(2 * len(pairs))) * std_y.max() / np.sqrt(k)
        multiples[name] = bias / (std_y.mean() / np.sqrt(k))
        print(
            f"\n{name}: exact {exact:.4f}, K-sample estimate {estimates.mean():.4f} +- {se:.4f}, "
            f"bias {bias:.4f} = {multiples[name]:.2f} x mean std(y)/sqrt(K), bound {bound:.4f}"
        )
        assert -3 * se <= bias <= bound  # upward, within the bound
    assert multiples["Q*"] > 1.5  # one std(y)/sqrt(K) understates the bias of a max over states
