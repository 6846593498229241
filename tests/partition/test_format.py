"""Partition directory: coverage, id maps, node data, halos, determinism, integrity, atomicity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import partition.format as fmt
import graphdist.data.staging as staging
from graphdist.data.graph import Graph
from graphdist.testing import random_graph, tiny_graph
from partition.api import PartitionFormatError, default_output, load_partition, partition, read_meta, PartitionConfig


def edge_set(graph: Graph) -> set[tuple[int, int]]:
    src, dst = graph.edge_index().tolist()
    return set(zip(src, dst))


def in_neighbours(graph: Graph) -> list[set[int]]:
    return [set(graph.in_neighbors(v).tolist()) for v in range(graph.num_nodes)]


@pytest.fixture(scope="module")
def graph() -> Graph:
    return random_graph(240, avg_degree=5, seed=4, feature_dim=2)


@pytest.mark.parametrize("method", ["metis", "random"])
def test_partition_covers_every_node_edge_and_halo(tmp_path, graph, method):
    out = partition(graph, 3, method=method, out=tmp_path / "p")
    meta = read_meta(out)
    orig_ids = np.load(out / "orig_ids.npy")
    node_map = np.load(out / "node_map.npy")
    assert sorted(orig_ids.tolist()) == list(range(graph.num_nodes))  # a permutation
    seen_inner: list[int] = []
    found_edges: set[tuple[int, int]] = set()
    nbrs = in_neighbours(graph)
    for p in range(3):
        part = load_partition(out, p)
        [(lo, hi)] = part.inner_ranges
        assert part.global_ids[: part.num_inner].tolist() == list(range(lo, hi))  # contiguous inner range
        assert set(node_map[lo:hi].tolist()) <= {p}
        assert torch.equal(part.owner(part.global_ids[part.num_inner :]), part.halo_owner)
        assert bool((part.halo_owner != p).all())
        inner_orig = part.orig_ids[part.global_ids[: part.num_inner]].tolist()
        seen_inner += inner_orig
        # Global <-> local maps invert each other.
        local_of = {int(g): i for i, g in enumerate(part.global_ids.tolist())}
        assert len(local_of) == part.num_local
        assert all(local_of[int(g)] == i for i, g in enumerate(part.global_ids.tolist()))
        # Every in-edge of every inner node is in this part, in original ids.
        cols = part.orig_ids[part.global_indices()].tolist()
        for row, v in enumerate(inner_orig):
            got = cols[int(part.indptr[row]) : int(part.indptr[row + 1])]
            assert sorted(got) == sorted(graph.in_neighbors(v).tolist())
            found_edges |= {(u, v) for u in got}
        halo_orig = set(part.orig_ids[part.global_ids[part.num_inner :]].tolist())
        assert halo_orig == set().union(*(nbrs[v] for v in inner_orig)) - set(inner_orig)
        # Node data: inner rows only, equal to the original rows (x = node id makes this exact).
        assert part.x.shape == (part.num_inner, 2)
        assert part.x[:, 0].long().tolist() == inner_orig
        assert part.y.tolist() == graph.y[inner_orig].tolist()
        for name in ("train_mask", "val_mask", "test_mask"):
            assert getattr(part, name).tolist() == getattr(graph, name)[inner_orig].tolist()
    assert sorted(seen_inner) == list(range(graph.num_nodes))  # inner in exactly one part
    assert found_edges == edge_set(graph)
    assert meta["part_offsets"][-1] == graph.num_nodes and meta["num_edges"] == graph.num_edges


def test_halo_hops_2_covers_two_hop_in_neighbourhood(tmp_path, graph):
    out = partition(graph, 3, method="random", out=tmp_path / "p", halo_hops=2)
    nbrs = in_neighbours(graph)
    for p in range(3):
        part = load_partition(out, p)
        local_orig = part.orig_ids[part.global_ids].tolist()
        local = set(local_orig)
        inner = local_orig[: part.num_inner]
        one_hop = set().union(*(nbrs[v] for v in inner)) | set(inner)
        two_hop = set().union(*(nbrs[u] for u in one_hop)) | one_hop
        assert two_hop <= local
        assert local == two_hop  # nothing beyond 2 hops
        # Rows exist for inner nodes and every halo node within 1 hop, with complete in-neighbours.
        cols = part.orig_ids[part.global_indices()].tolist()
        row_nodes = local_orig[: part.num_rows]
        assert set(row_nodes) == one_hop
        for row, v in enumerate(row_nodes):
            assert sorted(cols[int(part.indptr[row]) : int(part.indptr[row + 1])]) == sorted(nbrs[v])


def test_tiny_graph_known_split(tmp_path):
    g = tiny_graph()
    out = partition(g, 2, method="metis", balance="nodes", out=tmp_path / "tiny")
    meta = read_meta(out)
    assert [pm["num_halo"] for pm in meta["parts"]] == [2, 2]
    assert sum(pm["num_cut_edges"] for pm in meta["parts"]) == 4
    part = load_partition(out, 0)
    assert part.num_rows == part.num_inner == 5 and part.num_local == 7


def test_same_seed_same_files_other_seed_differs(tmp_path, graph):
    def files(name: str, seed: int) -> dict:
        return read_meta(partition(graph, 3, method="random", seed=seed, out=tmp_path / name))["files"]

    a, b, c = files("a", 0), files("b", 0), files("c", 1)
    assert a == b
    assert a["node_map.npy"] == c["node_map.npy"]  # equal part sizes...
    assert a["orig_ids.npy"] != c["orig_ids.npy"]  # ...but other nodes in them


def test_corrupted_byte_is_detected_and_named(tmp_path, graph):
    out = partition(graph, 2, method="random", out=tmp_path / "p")
    target = out / "part-1" / "indices.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    load_partition(out, 0)  # the other part is intact
    with pytest.raises(PartitionFormatError, match="part-1/indices.npy"):
        load_partition(out, 1)
    assert load_partition(out, 1, verify=False).num_inner > 0


def test_missing_meta_and_wrong_version_name_the_file(tmp_path, graph):
    out = partition(graph, 2, method="random", out=tmp_path / "p")
    meta = json.loads((out / "meta.json").read_text())
    meta["format_version"] = 99
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match="meta.json.*format_version 99"):
        load_partition(out, 0)
    with pytest.raises(PartitionFormatError, match="meta.json: missing"):
        read_meta(tmp_path)


def test_raising_mid_write_leaves_no_output(tmp_path, graph, monkeypatch):
    calls = {"n": 0}
    real = fmt.save_array

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(fmt, "save_array", flaky)
    with pytest.raises(RuntimeError, match="disk full"):
        partition(graph, 2, method="random", out=tmp_path / "p")
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary sibling


def test_refuses_to_overwrite_unless_forced(tmp_path, graph):
    out = partition(graph, 2, method="random", out=tmp_path / "p")
    with pytest.raises(FileExistsError, match="force=True"):
        partition(graph, 2, method="random", out=out)
    partition(graph, 3, method="random", out=out, force=True)
    assert read_meta(out)["num_parts"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["p"]
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("x")
    with pytest.raises(FileExistsError, match="not a partition directory"):
        partition(graph, 2, method="random", out=precious, force=True)
    assert (precious / "thesis.tex").exists()


def test_default_output_under_graphdist_cache(tmp_path, monkeypatch, graph):
    monkeypatch.setenv("GRAPHDIST_CACHE", str(tmp_path))
    out = partition(graph, 2, method="random", seed=3)
    assert out == tmp_path / "partitions" / f"{graph.name}-random-2-s3-h1"
    assert out == default_output(graph.name, PartitionConfig(num_parts=2, method="random", seed=3))


def test_meta_records_command_and_counts(tmp_path, graph):
    out = partition(graph, 2, method="stream", out=tmp_path / "p", command=["graphdist-partition", "--x"])
    meta = read_meta(out)
    assert meta["command"] == "graphdist-partition --x"
    assert meta["method"] == "stream" and meta["seed"] == 0 and meta["halo_hops"] == 1
    assert meta["feature_dim"] == 2 and meta["num_classes"] == graph.num_classes
    assert sum(p["num_inner"] for p in meta["parts"]) == graph.num_nodes
    assert sum(p["num_train"] for p in meta["parts"]) == int(graph.train_mask.sum())
    assert set(meta["files"]) >= {"node_map.npy", "orig_ids.npy", "part-0/x.npy", "part-1/masks.npy"}


def test_graph_without_edges_or_too_many_parts_is_rejected(tmp_path):
    empty = Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.int64), num_nodes=4)
    with pytest.raises(ValueError, match="no edges"):
        partition(empty, 2, out=tmp_path / "e")
    with pytest.raises(ValueError, match="--num-parts"):
        partition(tiny_graph(), 11, out=tmp_path / "t")
    assert list(tmp_path.iterdir()) == []


def _killed_while_writing(out, graph, at_call: int, force: bool = False, in_commit: bool = False) -> int:
    """Forks a writer that SIGKILLs itself at its ``at_call``-th array (or between the commit's two
    renames); returns its exit signal. No torch re-import: the child is a fork of this process."""
    import multiprocessing
    import os
    import signal

    def child():
        if in_commit:
            real = os.replace

            def replace(src, dst):
                real(src, dst)
                if ".old-" in str(dst):  # the existing output is moved aside; the new one not yet in
                    os.kill(os.getpid(), signal.SIGKILL)

            staging.os.replace = replace  # the commit's renames (os is the global module)
        else:
            real_save, calls = fmt.save_array, [0]

            def save(*args, **kwargs):
                calls[0] += 1
                if calls[0] == at_call:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real_save(*args, **kwargs)

            fmt.save_array = save
        partition(graph, 2, method="random", out=out, force=force)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    return -proc.exitcode


@pytest.mark.parametrize("at_call", [1, 4, 9])
def test_a_killed_writer_leaves_nothing_that_looks_complete_and_the_next_run_cleans_up(tmp_path, graph, at_call):
    import signal

    out = tmp_path / "p"
    assert _killed_while_writing(out, graph, at_call) == signal.SIGKILL
    assert not out.exists()
    assert [p.name.split("-")[0] for p in tmp_path.iterdir()] == [".p.tmp"]  # hidden, never "p"
    partition(graph, 2, method="random", out=out)
    assert [p.name for p in tmp_path.iterdir()] == ["p"]
    fmt.verify_files(out, read_meta(out))


def test_a_writer_killed_mid_replace_gets_the_previous_directory_back(tmp_path, graph):
    import signal

    out = partition(graph, 3, method="random", out=tmp_path / "p")
    assert _killed_while_writing(out, graph, 0, force=True, in_commit=True) == signal.SIGKILL
    assert not out.exists()  # killed between moving the old one aside and renaming the new one in
    left = sorted(tmp_path.iterdir())
    assert [p.name.split("-")[0] for p in left] == [".p.old", ".p.tmp"]
    assert staging.clean_stale_siblings(out) == [left[1]]  # the unfinished new one goes
    assert read_meta(out)["num_parts"] == 3  # the previous directory, restored
    assert [p.name for p in tmp_path.iterdir()] == ["p"]


def test_a_live_writers_temporary_directory_is_left_alone(tmp_path, graph):
    out = tmp_path / "p"
    live = tmp_path / ".p.tmp-1-live"
    with staging._held_directory(tmp_path / ".p.new-1-live", live):  # as another process writing now
        (tmp_path / ".p.tmp-2-dead").mkdir()
        partition(graph, 2, method="random", out=out)
        assert sorted(p.name for p in tmp_path.iterdir()) == [".p.tmp-1-live", "p"]
