"""The RLlib path: the DQNTorchLearner subclass applies our losses; backend rllib trains CartPole."""

from types import SimpleNamespace

import pytest
import torch
from conftest import assert_finite_metrics

from trainers.dqn_softlinf.loss import huber, mse, soft_linf


def _learner_loss(loss: str, double_q: bool):
    from ray.rllib.algorithms.dqn.dqn_learner import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.metrics import TD_ERROR_KEY
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from trainers.dqn_softlinf.rllib_learner import TD_ERROR_MAX_KEY, SurrogateDQNLearner

    batch = {
        Columns.ACTIONS: torch.tensor([0, 1, 1]),
        Columns.REWARDS: torch.tensor([1.0, 0.0, -1.0]),
        Columns.TERMINATEDS: torch.tensor([False, False, True]),
        "n_step": torch.tensor([1, 1, 1]),
        "weights": torch.tensor([1.0, 0.5, 2.0]),
    }
    fwd_out = {
        QF_PREDS: torch.tensor([[2.0, 0.0], [0.5, 1.5], [0.0, 3.0]]),
        QF_NEXT_PREDS: torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]]),
        QF_TARGET_NEXT_PREDS: torch.tensor([[3.0, 1.0], [1.0, 4.0], [5.0, 5.0]]),
    }
    config = SimpleNamespace(num_atoms=1, double_q=double_q, gamma=0.5, learner_config_dict={
        "loss": loss, "beta": 2.0, "beta_scale": "reward", "huber_delta": 1.0})
    stub = SimpleNamespace(metrics=MetricsLogger())
    value = SurrogateDQNLearner.compute_loss_for_module(
        stub, module_id="p", config=config, batch=batch, fwd_out=fwd_out)
    logged = stub.metrics.peek(("p", TD_ERROR_KEY))
    return value, torch.as_tensor(logged), stub.metrics.peek(("p", TD_ERROR_MAX_KEY)), batch["weights"]


@pytest.mark.parametrize("double_q", [False, True])
def test_learner_applies_our_losses_by_hand(double_q):
    # q(s,a) = [2.0, 1.5, 3.0]
    # targets: r + 0.5 * (1 - done) * Q_target(s', a*)
    #   plain max:  a* = argmax Q_target -> [3, 4, (terminal)] -> y = [2.5, 2.0, -1.0]
    #   double:     a* = argmax Q_online -> [1, 0, (terminal)] -> Q_target = [1, 1] -> y = [1.5, 0.5, -1.0]
    y = torch.tensor([1.5, 0.5, -1.0]) if double_q else torch.tensor([2.5, 2.0, -1.0])
    td = torch.tensor([2.0, 1.5, 3.0]) - y
    w = torch.tensor([1.0, 0.5, 2.0])
    for loss, expected in [("mse", mse(td, w)), ("huber", huber(td, 1.0, w)), ("soft_linf", soft_linf(td, 2.0, w))]:
        value, logged, td_max, _ = _learner_loss(loss, double_q)
        assert value.item() == pytest.approx(expected.item(), rel=1e-6)
        # RLlib's per-sample TD-error log, read by prioritized replay, is kept
        assert torch.allclose(logged.flatten(), td.abs())
        assert td_max == pytest.approx(td.abs().max().item())


@pytest.mark.slow
def test_rllib_backend_trains_cartpole_and_resumes(ray_session, local_trial, tmp_path):
    rows = local_trial("dqn_softlinf_rllib", trial_dir=tmp_path / "t", stop={"env/steps": 1000})
    assert rows and rows[-1]["env/steps"] >= 1000
    rest = local_trial("dqn_softlinf_rllib", trial_dir=tmp_path / "t")
    assert rest[0]["env/steps"] > rows[-1]["env/steps"]  # continued RLlib's own step counter
    last = rest[-1]
    assert last["env/steps"] >= 1500
    assert_finite_metrics(last, ["env/steps", "perf/env_steps_per_s", "train/loss", "train/q_mean",
                                 "episode/return_mean", "eval/return_mean", "bellman/td_error_max"])
