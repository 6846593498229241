"""The synthetic generator: determinism, structure (homophily, heavy tail) and the GNN-over-MLP gap."""

from __future__ import annotations

import re

import pytest
import torch

from graphdist.data import Graph
from graphdist.data.synthetic import synthetic  # not graphdist.data.synthetic: that name is also the submodule
from graphdist.data.synthetic import parse_synthetic_name

N = 12_000  # big enough for a visible degree tail, small enough for ~0.1 s per graph


@pytest.fixture(scope="module")
def graph() -> Graph:
    return synthetic(N, seed=0)


def edge_homophily(g: Graph) -> float:
    return float((g.y[g.indices] == g.y[g.dst_of_edges()]).float().mean())


def neighbour_mean(g: Graph) -> torch.Tensor:
    sums = torch.zeros_like(g.x).index_add_(0, g.dst_of_edges(), g.x[g.indices])
    return sums / g.degrees().clamp_min(1).unsqueeze(1).float()


def logistic_regression_accuracy(x: torch.Tensor, y: torch.Tensor, train: torch.Tensor, test: torch.Tensor) -> float:
    """Multinomial logistic regression (L-BFGS, light L2) fit on ``train``; accuracy on ``test``.

    Runs on one thread: these matrices are small, and on a shared 2-core machine OpenMP
    threads that spin-wait for each other made this 60x slower under load.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mean, std = x[train].mean(0), x[train].std(0) + 1e-6
        x = (x - mean) / std
        num_classes = int(y.max()) + 1
        weight = torch.zeros(x.shape[1], num_classes, requires_grad=True)
        bias = torch.zeros(num_classes, requires_grad=True)
        opt = torch.optim.LBFGS([weight, bias], max_iter=50, line_search_fn="strong_wolfe")
        x_train, y_train = x[train], y[train]

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(x_train @ weight + bias, y_train) + 1e-4 * weight.square().sum()
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            return float(((x[test] @ weight + bias).argmax(1) == y[test]).float().mean())
    finally:
        torch.set_num_threads(threads)


# ------------------------------------------------------------------ determinism
def test_same_seed_same_graph(graph):
    again = synthetic(N, seed=0)
    for field in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(graph, field), getattr(again, field)), field


def test_different_seed_different_graph(graph):
    other = synthetic(N, seed=1)
    assert not torch.equal(graph.y, other.y)
    assert not torch.equal(graph.x, other.x)
    assert graph.num_edges != other.num_edges or not torch.equal(graph.indices, other.indices)


# ------------------------------------------------------------------ shape of the output
def test_output_is_a_simple_undirected_graph_of_the_requested_size(graph):
    assert graph.num_nodes == N and graph.name == f"synthetic-{N}"
    assert graph.x.shape == (N, 100) and graph.x.dtype == torch.float32
    assert graph.num_classes == 16 and int(graph.y.min()) == 0
    dst = graph.dst_of_edges()
    keys = dst * N + graph.indices
    assert torch.equal(torch.sort(keys).values, keys) and bool((keys[1:] != keys[:-1]).all())  # sorted, no repeats
    assert not bool((graph.indices == dst).any())  # no self loops
    reverse = torch.sort(graph.indices * N + dst).values
    assert torch.equal(reverse, keys)  # every edge is stored in both directions
    # avg_degree counts directed edges; self loops and repeats cost a few percent at this size.
    assert 0.85 * 20 * N <= graph.num_edges <= 20 * N


def test_masks_are_disjoint_and_cover_every_node(graph):
    masks = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask]).long()
    assert bool((masks.sum(0) == 1).all())
    assert [int(m.sum()) for m in masks] == [int(0.6 * N), int(0.2 * N), int(0.2 * N)]


# ------------------------------------------------------------------ measurable structure
def test_edge_homophily_is_at_least_one_half(graph):
    h = edge_homophily(graph)
    assert h >= 0.5
    assert abs(h - 0.7) < 0.05  # and close to what was asked for


def test_homophily_argument_is_honoured():
    low = synthetic(5_000, homophily=0.3, num_features=4, seed=2)
    high = synthetic(5_000, homophily=0.9, num_features=4, seed=2)
    assert abs(edge_homophily(low) - 0.3) < 0.05 and abs(edge_homophily(high) - 0.9) < 0.05


def test_degree_distribution_has_a_heavy_tail(graph):
    degrees = graph.degrees().float()
    median = float(degrees.median())
    assert median > 0
    assert float(degrees.max()) >= 20 * median
    # A power law, not one outlier: the top 1% of nodes hold far more than 1% of the edges.
    top = torch.topk(degrees, N // 100).values.sum()
    assert float(top / degrees.sum()) > 0.05


def test_neighbour_aggregation_beats_features_alone_by_ten_points(graph):
    g = graph
    alone = logistic_regression_accuracy(g.x, g.y, g.train_mask, g.test_mask)
    with_neighbours = logistic_regression_accuracy(torch.cat([g.x, neighbour_mean(g)], 1), g.y, g.train_mask, g.test_mask)
    assert alone > 1.5 / 16  # the features do carry label signal ...
    assert with_neighbours >= alone + 0.10  # ... and the graph adds at least ten points


# ------------------------------------------------------------------ arguments
def test_small_and_featureless_graphs():
    g = synthetic(50, avg_degree=4, num_features=0, num_classes=3, seed=5, name="tiny")
    assert g.x is None and g.num_nodes == 50 and g.name == "tiny"
    empty = synthetic(10, avg_degree=0, num_features=2, num_classes=2)
    assert empty.num_edges == 0 and empty.x.shape == (10, 2)


def test_homophily_below_random_mixing_warns():
    with pytest.warns(UserWarning, match="below what random mixing gives"):
        g = synthetic(2_000, homophily=0.0, num_classes=4, num_features=2)
    assert 0.15 < edge_homophily(g) < 0.35  # clipped to ~1/4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_nodes": 1}, "num_nodes: expected an integer >= 2 (got 1)"),
        ({"num_nodes": 10.5}, "num_nodes: expected an integer >= 2 (got 10.5)"),
        ({"avg_degree": -1}, "avg_degree: expected in [0, num_nodes - 1 = 99] (got -1)"),
        ({"avg_degree": 100}, "avg_degree: expected in [0, num_nodes - 1 = 99] (got 100)"),
        ({"num_features": -1}, "num_features: expected an integer >= 0 (got -1)"),
        ({"num_classes": 0}, "num_classes: expected an integer in [1, num_nodes = 100] (got 0)"),
        ({"num_classes": 101}, "num_classes: expected an integer in [1, num_nodes = 100] (got 101)"),
        ({"homophily": 1.5}, "homophily: expected in [0, 1] (got 1.5)"),
        ({"degree_exponent": 1.0}, "degree_exponent: expected > 1"),
        ({"feature_signal": -0.1}, "feature_signal: expected >= 0 (got -0.1)"),
        ({"train_frac": 1.2}, "train_frac: expected in [0, 1] (got 1.2)"),
        ({"train_frac": 0.8, "val_frac": 0.3}, "val_frac: expected in [0, 1 - train_frac = 0.2] (got 0.3)"),
        ({"max_degree": 0}, "max_degree: expected > 0 or None (got 0)"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    args = {"num_nodes": 100, "avg_degree": 4, "num_features": 2, "num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        synthetic(**args)


@pytest.mark.parametrize(
    "name, size",
    [("synthetic-2500", 2500), ("synthetic-100k", 100_000), ("synthetic-1m", 1_000_000), ("Synthetic-1M", 1_000_000),
     ("synthetic-1.5k", 1500), ("synthetic-1_000", 1000), ("synthetic-", None), ("synthetic-0", None),
     ("synthetic-1.5", None), ("synthetic-10x", None), ("cora", None)],
)
def test_parse_synthetic_name(name, size):
    assert parse_synthetic_name(name) == size
