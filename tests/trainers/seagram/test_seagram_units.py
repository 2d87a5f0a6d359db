"""Hand-computed checks of the loss, MAP, attack selection rules and structural features."""

import math

import networkx as nx
import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from raylab import experiment as experiments
from raylab.config import from_dict
from raylab.errors import UserError
from trainers.seagram import attack as atk
from trainers.seagram.config import Config
from trainers.seagram.loss import average_precision, mean_average_precision, ranking_hinge_loss
from trainers.seagram.model import VICTIMS, build_victim, dense_batch


def test_average_precision_hand_computed():
    s = torch.tensor([0.9, 0.8, 0.7, 0.6])
    assert average_precision(s, torch.tensor([1, 0, 1, 0])) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision(s, torch.tensor([0, 1, 0, 1])) == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert average_precision(s, torch.tensor([1, 1, 0, 0])) == pytest.approx(1.0)
    assert math.isnan(average_precision(s, torch.tensor([0, 0, 0, 0])))


def test_average_precision_ties_form_one_threshold():
    # Threshold 1: 1 of 2 items relevant (P 1/2, R 1/2); threshold 0: P 2/3, R 1.
    s, y = torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1, 0, 1])
    assert average_precision(s, y) == pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3)
    # ... whatever order the tied items are listed in.
    assert average_precision(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0, 1, 1])) == pytest.approx(
        0.5 * 0.5 + 0.5 * 2 / 3
    )
    rng = np.random.default_rng(0)
    for _ in range(20):
        scores = rng.integers(0, 4, size=12).astype(float)
        labels = rng.integers(0, 2, size=12)
        if labels.sum() == 0:
            continue
        assert average_precision(torch.tensor(scores), torch.tensor(labels)) == pytest.approx(
            average_precision_score(labels, scores)
        )


def test_map_is_the_mean_over_queries_with_positives():
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.6], [0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.4]])
    labels = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 0, 0]])
    assert mean_average_precision(scores, labels) == pytest.approx(((1 + 2 / 3) / 2 + 0.5) / 2)


def test_ranking_hinge_loss_hand_computed():
    # q1: triples (c0 > c1): [0.5 + 0.8 - 1.0]+ = 0.3, (c2 > c1): [0.5 + 0.8 - 0.2]+ = 1.1
    # q2: (c0 > c1): [0.5 + 1.0 - 0.0]+ = 1.5 (padded column 2 is a negative scored -10: 0)
    scores = torch.tensor([[1.0, 0.8, 0.2], [0.0, 1.0, -10.0]], requires_grad=True)
    labels = torch.tensor([[1, 0, 1], [1, 0, 0]])
    # q2 also has the triple (c0 > c2): [0.5 - 10 - 0]+ = 0
    loss = ranking_hinge_loss(scores, labels, margin=0.5)
    assert loss.item() == pytest.approx((0.3 + 1.1 + 1.5 + 0.0) / 4)
    loss.backward()
    assert scores.grad[0, 1].item() == pytest.approx(2 / 4)  # in two active triples as the negative
    assert ranking_hinge_loss(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.long), 0.5).item() == 0.0


def test_flip_gain_sign_follows_the_label():
    clean, flipped = torch.tensor([1.0, 1.0]), torch.tensor([0.4, 0.4])
    assert atk.flip_gain(clean, flipped, torch.tensor([1, 0])).tolist() == pytest.approx([0.6, -0.6])


def test_choose_flips_per_group():
    gain = torch.tensor([0.5, 2.0, -1.0, 3.0, 1.0, -1.0])
    allowed = torch.tensor([True, True, True, False, True, True])
    group = torch.tensor([0, 0, 0, 1, 1, 2])
    assert atk.choose_flips(gain, allowed, group, 3).tolist() == [1, 4, -1]
    assert atk.choose_flip(torch.tensor([1.0, 1.0]), torch.tensor([True, True])) == 0  # first of a tie
    assert atk.choose_flip(torch.tensor([-1.0]), torch.tensor([True])) == -1


def test_uncertainty_selection():
    p = torch.tensor([0.9, 0.5, 0.2, 0.55, 0.99])
    assert atk.uncertainty(torch.tensor([0.75])).item() == pytest.approx(0.5)
    assert atk.select_uncertain(p, 2).tolist() == [1, 3]


def test_top_per_group():
    value = torch.tensor([1.0, 5.0, 3.0, 2.0, 9.0, 0.0])
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    assert atk.top_per_group(value, group, 2).tolist() == [1, 2, 3, 4]


def test_flip_cycle_length_hand_computed():
    g = nx.cycle_graph(6)
    g.add_edge(0, 6)  # a pendant node on the hexagon
    cyc = atk.flip_cycle_length(nx.to_numpy_array(g, dtype=np.uint8))
    assert cyc[0, 1] == 6 and cyc[2, 3] == 6  # hexagon bonds lie on the 6-ring
    assert cyc[0, 2] == 3  # distance 2: closes a triangle
    assert cyc[0, 3] == 4  # distance 3: closes a 4-cycle
    assert cyc[0, 6] == 0  # a bridge lies on no cycle
    assert cyc[6, 3] == 5  # pendant to the opposite node: 6-0-1-2-3 + edge
    prof = atk.ring_profile(nx.to_numpy_array(g), cyc)
    assert prof.tolist() == pytest.approx([0, 0, 0, 6 / 7, 0, 0])


def test_certified_noncritical_hand_computed():
    path = nx.to_numpy_array(nx.path_graph(4), dtype=np.uint8)  # 0-1-2-3
    mapped = np.array([True, True, False, False])  # the image of a query edge
    image_edges = np.zeros_like(path)
    image_edges[0, 1] = image_edges[1, 0] = 1
    ind = atk.certified_noncritical(path, image_edges, mapped, induced=True)
    assert not ind[0, 1] and ind[0, 2] and ind[2, 3] and ind[1, 3]
    mono = atk.certified_noncritical(path, image_edges, mapped, induced=False)
    assert not mono[0, 1] and mono[1, 2] and mono[0, 3]
    assert not ind.diagonal().any()


def test_flipped_and_pair_batch():
    a = nx.to_numpy_array(nx.path_graph(3), dtype=np.uint8)
    b = atk.flipped(a, 0, 2)
    assert b[0, 2] == b[2, 0] == 1 and a[0, 2] == 0
    batch = atk.PairBatch.build([a, a], [b, a], np.array([1, 0]), 5, 6)
    assert batch.c_adj.shape == (2, 6, 6) and batch.q_adj.shape == (2, 5, 5)
    assert np.array_equal(batch.graph(0), b) and np.array_equal(batch.query(1), a)


@pytest.mark.parametrize("name", VICTIMS)
def test_victims_are_invariant_to_node_order_and_padding(name):
    torch.manual_seed(0)
    model = build_victim(name, 16, 2).eval()
    rng = np.random.default_rng(1)
    q = nx.to_numpy_array(nx.cycle_graph(5), dtype=np.uint8)
    c = nx.to_numpy_array(nx.connected_watts_strogatz_graph(9, 3, 0.3, seed=1), dtype=np.uint8)
    perm = rng.permutation(9)
    c_perm = c[np.ix_(perm, perm)]
    with torch.no_grad():
        base = model(*dense_batch([q]), *dense_batch([c]))
        permuted = model(*dense_batch([q]), *dense_batch([c_perm]))
        padded = model(*dense_batch([q], 12), *dense_batch([c], 16))
    assert base.shape == (1,)
    assert permuted.item() == pytest.approx(base.item(), rel=1e-4, abs=1e-5)
    assert padded.item() == pytest.approx(base.item(), rel=1e-4, abs=1e-5)
    assert base.item() <= 0  # order-violation and alignment scores are never positive


def test_config_validation_names_the_key():
    with pytest.raises(UserError, match="al_init"):
        from_dict(Config, {"al_budget": 10, "al_init": 20}, "test")
    with pytest.raises(UserError, match="split"):
        from_dict(Config, {"split": [0.5, 0.5, 0.5]}, "test")
    with pytest.raises(UserError, match="query_nodes"):
        from_dict(Config, {"query_nodes": [7, 25]}, "test")
    with pytest.raises(UserError, match="victim"):
        from_dict(Config, {"victim": "gcn"}, "test")
    assert from_dict(Config, {}, "test").al_per_round == 150


@pytest.mark.parametrize("name", ["seagram", "seagram_baselines", "seagram_no_labels", "seagram_victims"])
@pytest.mark.parametrize("smoke", [False, True])
def test_experiment_files_validate(name, smoke):
    experiment = experiments.load(name, smoke=smoke)
    metric = {"seagram": ("clf/auroc", "max"), "seagram_victims": ("victim/map_val", "max")}
    assert (experiment.metric, experiment.mode) == metric.get(name, ("attack/map", "min"))
    # the attack experiments load the victim stage's victims; their smokes train a small one
    assert experiment.config.get("victim_from", "") == (
        "" if smoke or name == "seagram_victims" else "results/seagram_victims"
    )
    if smoke:
        assert experiment.resources.gpus_per_worker == 0 and experiment.config["source"] == "nci"
    else:
        assert experiment.resources.gpus_per_worker == 0.25  # four trials share a GPU (packing)
