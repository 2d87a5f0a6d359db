"""Attack metrics and early-stage signatures against hand-computed values."""

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
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                torch.nn.Linear(6, 3)).eval()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    params = list(model.parameters())
    grads = []
    for i in range(5):  # one backward pass per sample: the definition
        g = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), params)
        grads.append(torch.cat([t.flatten() for t in g]))
    g = torch.stack(grads)
    cos = torch.nn.functional.cosine_similarity(g[:, None], g[None, :], dim=-1)
    expected = float((cos.sum() - cos.diagonal().sum()) / 20)
    for chunk in (1, 2, 8):  # vmap over chunks of any size gives the same mean
        assert probe.gradient_coherence(model, x, y, chunk=chunk) == pytest.approx(expected, abs=1e-6)


def test_on_untriggered_images_the_same_label_coherence_contrast_is_about_zero():
    """Per-sample CE gradients share ``softmax - e_y``: one-label groups are coherent with no
    trigger at all, so only a same-label control can isolate the trigger."""
    from raylab.models import resnet18

    torch.manual_seed(0)
    net = resnet18(10, width=8).eval()
    x = torch.rand(48, 3, 32, 32)
    target = torch.zeros(16, dtype=torch.long)
    one_label_a = probe.gradient_coherence(net, x[:16], target)
    one_label_b = probe.gradient_coherence(net, x[16:32], target)
    mixed = probe.gradient_coherence(net, x[32:], torch.arange(16) % 10)
    coherence = {"poison": one_label_a, "relabel": one_label_b, "clean": mixed}
    assert abs(probe.gap(coherence, "relabel")) < 0.05, coherence
    assert probe.gap(coherence, "clean") > 0.5, coherence  # the confound a mixed-label control has


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
