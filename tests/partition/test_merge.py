"""A worker's union of parts equals the same union written as one part (in original ids)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.testing import random_graph
from partition.format import load_partition, staged_directory, write_partition_files
from partition.merge import load_parts, merge_partitions


def _write(tmp_path, graph, assignment: np.ndarray, num_parts: int, halo_hops: int, name: str):
    out = tmp_path / name
    with staged_directory(out) as tmp:
        write_partition_files(tmp, graph, assignment, num_parts, halo_hops=halo_hops)
    return out


def _in_orig_ids(part):
    """Everything a trainer reads from a part, keyed by original node id (local order differs)."""
    orig = part.orig_ids.index_select(0, part.global_ids.to(torch.int64))
    rows = {}
    for r in range(part.num_rows):
        cols = part.indices[int(part.indptr[r]): int(part.indptr[r + 1])].to(torch.int64)
        rows[int(orig[r])] = sorted(orig.index_select(0, cols).tolist())
    inner = orig[: part.num_inner]
    order = torch.argsort(inner)
    data = {k: getattr(part, k)[order] for k in ("x", "y", "train_mask", "val_mask", "test_mask")}
    halo = dict(zip(orig[part.num_inner:].tolist(), part.halo_owner.tolist()))
    return rows, inner[order], data, halo


@pytest.mark.parametrize("halo_hops", [1, 2])
def test_union_of_parts_is_the_union_written_as_one_part(tmp_path, halo_hops):
    graph = random_graph(300, avg_degree=4, seed=3, feature_dim=3)
    four = np.random.default_rng(0).integers(0, 4, graph.num_nodes)
    fine = _write(tmp_path, graph, four, 4, halo_hops, "four")
    # Parts {0, 2} as one part and {1, 3} as another: the union of non-adjacent part ids.
    coarse = _write(tmp_path, graph, four % 2, 2, halo_hops, "two")
    union = load_parts(fine, [2, 0])
    assert union.parts == (0, 2) and union.name == "parts [0, 2]"
    rows, inner, data, halo = _in_orig_ids(union)
    want_rows, want_inner, want_data, want_halo = _in_orig_ids(load_partition(coarse, 0))
    assert rows == want_rows
    assert torch.equal(inner, want_inner)
    for k in data:
        assert torch.equal(data[k], want_data[k]), k
    assert set(halo) == set(want_halo)  # the owners name fine parts (1 or 3) here, coarse part 1 there
    assert set(halo.values()) <= {1, 3}


def test_inner_local_over_several_ranges(tmp_path):
    graph = random_graph(120, avg_degree=3, seed=1)
    fine = _write(tmp_path, graph, np.arange(graph.num_nodes) % 3, 3, 1, "three")
    union = load_parts(fine, [0, 2])
    offsets = union.part_offsets.tolist()
    ids = torch.arange(offsets[-1])
    local = union.inner_local(ids)
    own = (ids < offsets[1]) | (ids >= offsets[2])
    assert torch.equal(local[own], torch.arange(union.num_inner))  # inner order: part 0, then part 2
    assert bool((local[~own] == -1).all())
    assert torch.equal(union.inner_global_ids(), ids[own])
    assert torch.equal(union.global_ids[: union.num_inner], ids[own])


def test_merge_refuses_parts_of_two_directories_and_repeats(tmp_path):
    graph = random_graph(60, avg_degree=3, seed=2)
    a = _write(tmp_path, graph, np.arange(60) % 2, 2, 1, "a")
    b = _write(tmp_path, graph, (np.arange(60) // 30), 2, 1, "b")
    with pytest.raises(ValueError, match="different partition directories"):
        merge_partitions([load_partition(a, 0), load_partition(b, 1)])
    with pytest.raises(ValueError, match="part given twice"):
        merge_partitions([load_partition(a, 0), load_partition(a, 0)])
