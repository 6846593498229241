"""Partition statistics and the memory estimate."""

from __future__ import annotations

import pytest

from graphdist.testing import random_graph, tiny_graph, tiny_partition
from partition.api import estimate_memory, partition, partition_stats
from partition.stats import format_table


def test_tiny_stats_are_exact():
    s = partition_stats(tiny_graph(), tiny_partition())
    assert s.inner_nodes == [5, 5] and s.halo_nodes == [2, 2]
    assert s.cut_edges == 4 and s.edge_cut == pytest.approx(4 / 24)
    assert s.edges == [12, 12] and s.train_nodes == [3, 2]
    assert s.node_balance == 1.0 and s.train_balance == pytest.approx(3 / 2.5)
    assert s.replication_factor == pytest.approx(14 / 10)
    assert s.label_tvd == [0.5, 0.5]  # each ring holds one of the two labels


def test_directory_stats_equal_in_memory_stats(tmp_path):
    g = random_graph(200, seed=5)
    out = partition(g, 3, method="random", out=tmp_path / "p")
    import numpy as np

    orig = np.load(out / "orig_ids.npy")
    parts = np.empty_like(orig)
    parts[orig] = np.load(out / "node_map.npy")
    assert partition_stats(out).to_dict() == partition_stats(g, parts, 3).to_dict()


def test_table_has_a_row_per_part_and_a_summary():
    text = format_table(partition_stats(tiny_graph(), tiny_partition()))
    lines = text.splitlines()
    assert len(lines) == 4 and "edge cut 0.1667" in lines[-1] and "label TVD" in lines[0]


def test_memory_estimate_grows_with_the_graph_and_fits_the_target():
    small = estimate_memory(1000, 20_000, 8)
    big = estimate_memory(1_000_000, 20_000_000, 8, feature_dim=100)
    assert small.peak < big.peak
    assert estimate_memory(1_000_000, 20_000_000, 8, "random").peak < big.peak
    assert 1.5 * 2**30 < big.peak < 4 * 2**30
    assert "GiB" in big.describe()


def test_metis_that_cannot_fit_is_refused_before_any_work(monkeypatch):
    import psutil

    from graphdist.testing import random_graph
    from partition.api import PartitionConfig, check_memory_fits

    graph = random_graph(500, avg_degree=8)

    class Little:
        available = 1 << 10  # 1 KiB

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Little())
    with pytest.raises(ValueError, match=r"--method metis: METIS needs about .* GiB .* use --method stream"):
        partition(graph, 2, method="metis")
    check_memory_fits(graph, PartitionConfig(2, method="stream"))  # the streaming methods are not refused
