"""The one-hop scan writer equals the per-part builder, byte for byte, whatever the block and group sizes."""

from __future__ import annotations

import numpy as np
import pytest

import partition.scan as scan
from graphdist.testing import random_graph
from partition.csr import graph_arrays
from partition.format import _structure_counts
from partition.halo import Relabel, build_part


@pytest.mark.parametrize("num_parts, block_edges, mark_bytes", [(3, 1 << 23, 1 << 29), (4, 37, 150), (1, 5, 10)])
def test_scan_writes_what_the_per_part_builder_builds(tmp_path, monkeypatch, num_parts, block_edges, mark_bytes):
    monkeypatch.setattr(scan, "BLOCK_EDGES", block_edges)  # many blocks
    monkeypatch.setattr(scan, "MARK_BYTES", mark_bytes)  # halo marks in groups of parts
    monkeypatch.setattr(scan, "BLOCK_BYTES", 64)  # feature blocks of a few rows
    graph = random_graph(300, avg_degree=6, seed=num_parts, feature_dim=3)
    parts = np.random.default_rng(num_parts).integers(0, num_parts, graph.num_nodes)
    relabel = Relabel.from_parts(parts, num_parts)
    files: dict = {}
    counts = scan.write_one_hop_parts(tmp_path, graph, parts, num_parts, relabel, files)
    indptr, indices = graph_arrays(graph)
    for p in range(num_parts):
        expected = build_part(indptr, indices, relabel, p, halo_hops=1)
        inner = relabel.orig_ids[relabel.part_offsets[p]: relabel.part_offsets[p + 1]]
        for name, array in (("indptr", expected.indptr), ("indices", expected.indices),
                            ("global_ids", expected.global_ids), ("halo_owner", expected.halo_owner),
                            ("x", graph.x.numpy()[inner])):
            np.testing.assert_array_equal(np.load(tmp_path / f"part-{p}/{name}.npy"), array)
        assert counts[p] == _structure_counts(expected, num_parts, p)
    assert sorted(files) == sorted(f"part-{p}/{name}.npy" for p in range(num_parts)
                                   for name in ("indptr", "indices", "global_ids", "halo_owner", "x"))
