"""Attack metrics and early-stage signatures against hand-computed values."""

import copy
import math

import pytest
import torch

from trainers.backdoor import probe


def test_asr_and_ra_leave_out_target_class_images():
    y_true = torch.tensor([0, 1, 2, 3, 0])
    pred = torch.tensor([0, 0, 2, 0, 0])  # target 0; the two class-0 images must not count
    assert probe.attack_success_rate(pred, y_true, target=0) == pytest.approx(2 / 3)
    assert probe.robust_accuracy(pred, y_true, target=0) == pytest.approx(1 / 3)
    assert probe.accuracy(pred, y_true) == pytest.approx(3 / 5)


def test_logit_margin_by_hand():
    logits = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, 1.0]])
    margins = probe.logit_margin(logits, torch.tensor([0, 2]))
    assert margins.tolist() == [1.0, -2.0]


def test_mean_pairwise_cosine_by_hand():
    v = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    # cos pairs: (1,2)=0, (1,3)=1/sqrt2, (2,3)=1/sqrt2 -> mean = sqrt2/3
    assert probe.mean_pairwise_cosine(v) == pytest.approx(math.sqrt(2) / 3, abs=1e-6)
    assert probe.mean_pairwise_cosine(torch.tensor([[1.0, 1.0], [2.0, 2.0]])) == pytest.approx(1.0)


def test_gradient_coherence_equals_explicit_pairwise_cosines():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
    ).eval()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    params = list(model.parameters())
    grads = []
    for i in range(5):  # one backward pass per sample: the definition
        g = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]), params)
        grads.append(torch.cat([t.flatten() for t in g]))
    g = torch.stack(grads)
    cos = torch.nn.functional.cosine_similarity(g[:, None], g[None, :], dim=-1)
    expected = float((cos.sum() - cos.diagonal().sum()) / 20)
    for chunk in (1, 2, 8):  # vmap over chunks of any size gives the same mean
        assert probe.gradient_coherence(model, x, y, chunk=chunk) == pytest.approx(expected, abs=1e-6)


def _digits(poison_ratio: float, **fields):
    """The real digits training set poisoned by BadNets, its probe groups and the config."""
    from raylab.config import from_dict
    from trainers.backdoor.config import Config
    from trainers.backdoor.loop import build_data

    cfg = from_dict(
        Config,
        {
            "dataset": "mnist5k",
            "attack": "badnets",
            "poison_ratio": poison_ratio,
            "probe_size": 32,
            "coherence_size": 16,
            **fields,
        },
        "test",
    )
    return build_data(cfg, torch.device("cpu")), cfg


class TriggerIndicator(torch.nn.Module):
    """One channel: the mean of the bottom-right 3x3 corner (1 with the BadNets patch, about 0 on a
    digit), then BatchNorm, as in a network that has learned the trigger."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(1)

    def forward(self, x):
        return self.bn(x[:, :1, -3:, -3:].mean((2, 3), keepdim=True)).flatten()


@pytest.mark.parametrize("poison_ratio", [0.01, 0.1])
def test_probes_normalise_a_trigger_channel_as_training_does(poison_ratio):
    from raylab.data.augment import to_float
    from trainers.backdoor import GROUPS
    from trainers.backdoor.loop import probe_network

    data, _ = _digits(poison_ratio)
    net = TriggerIndicator()
    with torch.no_grad():  # training: the batch statistics of the poisoned training set
        net.train()
        trained = float(net(to_float(data.train_x))[data.poison_idx].mean())
        probed = float(probe_network(net, data.bn_x)(to_float(data.probe_x["poison"])).mean())
        old = probe_network(net, to_float(torch.cat([data.probe_x[g] for g in GROUPS])))
        old_probed = float(old(to_float(data.probe_x["poison"])).mean())
    print(f"p={poison_ratio}: training {trained:.3f}, probes {probed:.3f}, probe-set statistics {old_probed:.3f}")
    assert probed == pytest.approx(trained, rel=0.05)
    assert old_probed < trained / 1.5  # what a 25%-triggered probe batch did: the instrument sees it


def test_prior_corrected_contrast_ignores_a_change_of_the_final_bias_alone(one_thread):
    from raylab.models import resnet18
    from trainers.backdoor.loop import probe_groups

    data, cfg = _digits(0.1, coherence_size=2, probe_bn_size=128)
    torch.manual_seed(0)
    net = resnet18(10, data.mean, data.std, width=4)
    before = probe_groups(net, data, cfg)
    prior = torch.bincount(data.train_y, minlength=10).double() / len(data.train_y)
    for delta in (prior.log(), 3 * prior.log() + torch.randn(10, dtype=torch.float64)):
        with torch.no_grad():
            changed = copy.deepcopy(net)
            changed.linear.bias += delta.float()
        after = probe_groups(changed, data, cfg)
        drop = {g: before[g]["loss"] - after[g]["loss"] for g in before}
        corrected = {g: before[g]["loss_prior_corrected"] - after[g]["loss_prior_corrected"] for g in before}
        assert abs(probe.gap(drop, "clean")) > 0.1, drop  # the plain contrast sees the prior
        assert abs(probe.gap(corrected, "clean")) < 1e-3, corrected


def test_on_untriggered_images_the_same_label_coherence_contrast_is_about_zero(one_thread):
    """Through the probes' own groups and normalisation, at initialization: per-sample CE
    gradients share ``softmax - e_y``, so the one-label groups are coherent with or without the
    trigger and only a same-label control isolates it."""
    from raylab.models import resnet18
    from trainers.backdoor.loop import probe_groups

    data, cfg = _digits(0.1, coherence_size=12, probe_bn_size=256)
    for seed in (0, 1):
        torch.manual_seed(seed)
        groups = probe_groups(resnet18(10, data.mean, data.std, width=4), data, cfg)
        coherence = {g: v["coherence"] for g, v in groups.items()}
        print(seed, {g: round(v, 3) for g, v in coherence.items()})
        assert abs(probe.gap(coherence, "relabel")) < 0.05, coherence
        assert coherence["relabel"] - coherence["clean"] > 0.05, coherence  # the mixed-label confound


def test_gate_flips_drops_and_gaps():
    before = torch.tensor([[True, False], [True, True]])
    after = torch.tensor([[False, False], [True, False]])
    assert probe.gate_flip_fraction(before, after) == 0.5
    assert probe.relative_drop(2.0, 1.5) == 0.25
    assert probe.gap({"poison": 0.5, "target": 0.2, "relabel": 0.7}, "target") == pytest.approx(0.3)
    assert probe.gap({"poison": 0.5, "target": 0.2, "relabel": 0.7}, "relabel") == pytest.approx(-0.2)


def test_selectivity_is_cohens_d_by_hand_and_ablation_zeroes_columns():
    trig = torch.tensor([[3.0, 1.0], [5.0, 1.0]])  # neuron 0: mean 4, var 1; neuron 1 constant
    clean = torch.tensor([[0.0, 1.0], [2.0, 1.0]])  # neuron 0: mean 1, var 1
    sel = probe.selectivity(trig, clean)
    assert sel[0] == pytest.approx(3.0, rel=1e-5) and sel[1] == pytest.approx(0.0, abs=1e-5)
    assert probe.top_neurons(sel, 1).tolist() == [0]
    assert probe.ablate(trig, torch.tensor([0])).tolist() == [[0.0, 1.0], [0.0, 1.0]]


def test_early_signature_by_hand():
    """One probe against the baseline: drops, growths, gate flips and the gaps, by hand."""

    def group(loss, corrected, margin, coherence):
        return {"loss": loss, "loss_prior_corrected": corrected, "margin": margin, "coherence": coherence}

    baseline = {
        "poison": group(2.0, 1.5, 0.0, 0.1),
        "target": group(2.0, 1.0, 0.5, 0.2),
        "relabel": group(2.5, 2.0, 0.0, 0.3),
        "clean": group(1.0, 1.0, 1.0, 0.0),
    }
    now = {
        "poison": group(0.5, 0.5, 2.0, 0.9),
        "target": group(1.5, 0.5, 1.0, 0.4),
        "relabel": group(2.0, 1.5, 0.5, 0.3),
        "clean": group(0.8, 0.9, 1.5, 0.1),
    }
    before = {g: torch.tensor([[True, False], [True, True]]) for g in now}
    after = {**before, "poison": torch.tensor([[False, False], [True, False]])}
    row = probe.early_signature(baseline, now, before, after, controls=("target", "relabel"))
    assert row["early/loss_drop_poison"] == 1.5 and row["early/rel_drop_poison"] == 0.75
    assert row["early/margin_growth_poison"] == 2.0 and row["early/grad_coherence_poison"] == 0.9
    assert row["early/gate_flip_since_last_poison"] == 0.5 and row["early/gate_flip_since_last_clean"] == 0.0
    assert row["early/loss_drop_gap_vs_target"] == 1.5 - 0.5 and row["early/loss_drop_gap_vs_clean"] == 1.5 - 0.2
    assert row["early/margin_growth_gap_vs_relabel"] == 2.0 - 0.5
    assert row["early/gate_flip_since_last_gap_vs_target"] == 0.5
    assert row["early/loss_drop_prior_corrected_gap_vs_clean"] == 1.0 - 0.1
    assert row["early/grad_coherence_gap_vs_relabel"] == 0.9 - 0.3


def test_gradient_signal_is_the_first_order_rate_of_the_group_loss_under_a_whole_loss_step():
    """``probe.gradient_alignment``'s signal ``<grad L_G, grad L>``: a small step of size eta along
    ``-grad L`` lowers ``L_G`` by ``eta signal`` to first order (the ResNet-side counterpart of the
    theory's ``S_G``), and the alignment is the two gradients' cosine."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
    x, y = torch.randn(40, 6, dtype=torch.float64), torch.randint(0, 3, (40,))
    group = slice(0, 10)
    whole = probe.loss_gradient(net, x, y)
    shown = probe.gradient_alignment(probe.loss_gradient(net, x[group], y[group]), whole)
    loss = lambda: float(torch.nn.functional.cross_entropy(net(x[group]), y[group]))  # noqa: E731
    before, eta = loss(), 1e-6
    with torch.no_grad():
        offset = 0
        for p in net.parameters():
            p -= eta * whole[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
    assert (before - loss()) / eta == pytest.approx(shown["signal"], rel=1e-4)
    g = probe.loss_gradient(net, x[group], y[group])  # after the tiny step: the same direction
    assert shown["alignment"] == pytest.approx(float(g @ whole / (g.norm() * whole.norm())), abs=1e-3)
    assert -1 <= shown["alignment"] <= 1
