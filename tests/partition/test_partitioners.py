"""Partitioners: validity, determinism, METIS + train-balance refinement, relative quality."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.data.graph import Graph
from graphdist.testing import random_graph, tiny_graph, tiny_partition
from partition.csr import cut_edges, graph_arrays, symmetric_csr
from partition.methods import PARTITIONERS
from partition.methods.metis import metis, validate_balance
from partition.methods.refine import refine_train_balance
from partition.methods.stream import stream
from partition.stats import partition_stats


def load_cora(path: Path) -> Graph:
    d = np.load(path)
    return Graph.from_edge_index(
        d["edge_index"], num_nodes=d["y"].shape[0], y=d["y"], train_mask=d["train_mask"],
        val_mask=d["val_mask"], test_mask=d["test_mask"], name="cora",
    )


def cut_fraction(graph: Graph, parts: np.ndarray) -> float:
    indptr, indices = graph_arrays(graph)
    return cut_edges(indptr, indices, parts) / indices.size


def concentrated_train_graph() -> Graph:
    """A community graph whose train nodes all sit in one community (one region)."""
    from graphdist.data.synthetic import synthetic

    g = synthetic(4000, avg_degree=12, num_features=0, num_classes=6, seed=0)
    rng = np.random.default_rng(0)
    train = (g.y.numpy() == 0) & (rng.random(g.num_nodes) < 0.5)
    g.train_mask = torch.from_numpy(train)
    return g


@pytest.mark.parametrize("method", sorted(PARTITIONERS))
def test_every_node_gets_one_valid_part(method):
    g = random_graph(300, seed=1)
    parts = PARTITIONERS[method](g, 3, seed=0)
    assert parts.shape == (300,) and parts.dtype == np.int64
    assert parts.min() >= 0 and parts.max() < 3
    assert np.bincount(parts, minlength=3).min() > 0


@pytest.mark.parametrize("method", ["random", "super", "stream"])
def test_same_seed_same_parts_other_seed_differs(method):
    g = random_graph(400, seed=2)
    kwargs = {"num_clusters": 40} if method == "super" else {}
    a = PARTITIONERS[method](g, 4, seed=0, **kwargs)
    b = PARTITIONERS[method](g, 4, seed=0, **kwargs)
    c = PARTITIONERS[method](g, 4, seed=1, **kwargs)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_metis_recovers_the_two_rings():
    parts = metis(tiny_graph(), 2, seed=0, balance=("nodes",))
    expected = tiny_partition().numpy()
    assert np.array_equal(parts, expected) or np.array_equal(parts, 1 - expected)


def test_num_parts_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="num_parts"):
        metis(tiny_graph(), 0)
    with pytest.raises(ValueError, match="at most the number of nodes"):
        PARTITIONERS["random"](tiny_graph(), 11)


def test_balance_names_are_validated():
    assert validate_balance("nodes, train") == ("nodes", "train")
    with pytest.raises(ValueError, match="--balance"):
        validate_balance("nodes,weight")


def test_symmetric_csr_of_a_directed_graph():
    g = Graph.from_edge_index(torch.tensor([[0, 1, 1, 2, 2], [1, 2, 2, 2, 0]]), num_nodes=3)
    xadj, adjncy = symmetric_csr(g)
    pairs = {(int(d), int(s)) for d in range(3) for s in adjncy[xadj[d] : xadj[d + 1]]}
    assert pairs == {(1, 0), (0, 1), (2, 1), (1, 2), (0, 2), (2, 0)}  # loop and duplicate gone
    assert adjncy.size == len(pairs)


def _assert_refined(info: dict, num_parts: int) -> None:
    report = info["refine"]
    counts = np.array(report["train_after"])
    mean = counts.sum() / num_parts
    assert np.all(np.abs(counts - mean) <= 0.1 * mean + 1e-9), report
    assert report["final_cut"] <= 1.1 * report["metis_cut"], report
    assert report["balanced"]


@pytest.mark.parametrize("num_parts", [4, 8])
def test_refinement_balances_train_nodes_on_cora(dataset_path, num_parts):
    g = load_cora(dataset_path("cora"))
    info: dict = {}
    parts = metis(g, num_parts, seed=0, info=info)
    _assert_refined(info, num_parts)
    # The report describes the returned parts, and METIS's cut is the unrefined result's.
    train_counts = np.bincount(parts[g.train_mask.numpy()], minlength=num_parts)
    assert train_counts.tolist() == info["refine"]["train_after"]
    unrefined = metis(g, num_parts, seed=0, refine=False)
    xadj, adjncy = symmetric_csr(g)
    assert cut_edges(xadj, adjncy, unrefined) == info["refine"]["metis_cut"]


@pytest.mark.parametrize("num_parts", [4, 8])
def test_refinement_on_train_nodes_concentrated_in_one_region(num_parts):
    g = concentrated_train_graph()
    info: dict = {}
    metis(g, num_parts, seed=0, info=info)
    before = np.array(info["refine"]["train_before"])
    # METIS alone leaves the region's part far above the band: the refinement has work to do.
    assert before.max() > 2 * before.sum() / num_parts
    _assert_refined(info, num_parts)


def test_refinement_spreads_moves_over_all_underfull_parts():
    g = tiny_graph()
    xadj, adjncy = symmetric_csr(g)
    train = np.zeros(10, dtype=bool)
    train[[0, 1, 2, 3, 4, 5]] = True  # six train nodes, all in part 0 of a 3-way split
    parts = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    new, report = refine_train_balance(xadj, adjncy, parts, train, 3, max_cut_growth=10.0)
    assert report.train_after == [2, 2, 2]


def test_stream_cut_lies_between_metis_and_random():
    from graphdist.data.synthetic import synthetic

    g = synthetic(5000, avg_degree=10, num_features=0, num_classes=8, seed=0)
    cuts = {m: cut_fraction(g, PARTITIONERS[m](g, 4, seed=0)) for m in ("metis", "stream", "random")}
    assert cuts["metis"] < cuts["stream"] < cuts["random"], cuts


def test_stream_fennel_and_natural_order_stay_balanced():
    g = random_graph(1000, seed=3)
    for kwargs in ({"objective": "fennel"}, {"order": "natural"}):
        parts = stream(g, 4, seed=0, **kwargs)
        assert np.bincount(parts, minlength=4).max() <= 1.05 * 1000 / 4 + 1


def test_cora_cut_order_and_label_uniformity(dataset_path):
    g = load_cora(dataset_path("cora"))
    parts = {m: PARTITIONERS[m](g, 4, seed=0) for m in ("metis", "super", "random")}
    cuts = {m: cut_fraction(g, p) for m, p in parts.items()}
    assert cuts["metis"] < cuts["super"] < cuts["random"], cuts
    tvd = {m: partition_stats(g, p, 4).mean_label_tvd for m, p in parts.items()}
    assert tvd["random"] < tvd["metis"], tvd
