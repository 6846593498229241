"""load_graph: named datasets, the dataset directories and cache, .npz, and its errors (OGB, PyG and
edge-list inputs: test_formats.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.data.loaders import cache_dir, dataset_dirs, find_dataset, load_graph
from graphdist.data.readers import npz as npz_reader, planetoid
from graphdist.testing.env import require

# From ../shared/datasets/README.md: nodes, directed edges, features, classes, train/val/test.
PLANETOID = {
    "cora": (2708, 10556, 1433, 7, (140, 500, 1000)),
    "citeseer": (3327, 9104, 3703, 6, (120, 500, 1000)),
    "pubmed": (19717, 88648, 500, 3, (60, 500, 1000)),
}


def edge_set(edge_index) -> set[tuple[int, int]]:
    return set(map(tuple, np.asarray(edge_index).T.tolist()))


# ------------------------------------------------------------------ named real datasets
@pytest.mark.parametrize("name", sorted(PLANETOID))
def test_planetoid_names_load_with_published_counts(name, dataset_path):
    path = dataset_path(name)  # skips (or fails when CI=true) if the data is missing
    nodes, edges, features, classes, (train, val, test) = PLANETOID[name]
    g = load_graph(name)
    assert g.name == name
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (nodes, edges, features, classes)
    assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())) == (train, val, test)
    assert not bool((g.train_mask & g.test_mask).any())
    assert g.x.dtype == torch.float32 and g.y.dtype == torch.int64
    # Both directions as stored, no edge lost or invented on the way into CSR.
    with np.load(path) as archive:
        assert edge_set(g.edge_index()) == edge_set(archive["edge_index"])
    assert edge_set(g.edge_index()) == {(d, s) for s, d in edge_set(g.edge_index())}
    assert torch.equal(load_graph(path).indices, g.indices)  # the path loads the same graph


def test_citeseer_keeps_unlabelled_nodes_out_of_the_masks(dataset_path):
    dataset_path("citeseer")
    g = load_graph("citeseer")
    unlabelled = g.y == -1
    assert int(unlabelled.sum()) == 15
    assert not bool((unlabelled & (g.train_mask | g.val_mask | g.test_mask)).any())


def test_names_are_case_insensitive(dataset_path):
    dataset_path("cora")
    assert load_graph("Cora").num_nodes == 2708


def test_planetoid_raw_folder_opens_through_pyg(dataset_path, tmp_path):
    # A torch_geometric Planetoid folder (raw/ind.cora.*) is processed in the cache, not in place.
    raw_source = dataset_path("cora").parent / "raw" / "cora"
    require(raw_source.is_dir(), f"{raw_source} not present: the Planetoid raw files (ind.cora.*) beside cora.npz")
    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for file in raw_source.iterdir():
        (raw / file.name).symlink_to(file)
    g = load_graph(tmp_path / "Cora")
    assert (g.num_nodes, g.num_edges, g.num_features) == (2708, 10556, 1433)
    assert int(g.train_mask.sum()) == 140
    assert not (tmp_path / "Cora" / "processed").exists()
    assert any((cache_dir() / "pyg-local").rglob("data.pt"))


# ------------------------------------------------------------------ locations and name lookup
def test_dataset_dirs_and_cache_dir_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHDIST_DATA", f"{tmp_path / 'a'}{os.pathsep}{os.pathsep}{tmp_path / 'b'}")
    monkeypatch.setenv("GRAPHDIST_CACHE", str(tmp_path / "cache"))
    assert dataset_dirs() == [tmp_path / "a", tmp_path / "b"]
    assert cache_dir() == tmp_path / "cache" and not (tmp_path / "cache").exists()
    assert cache_dir(create=True).is_dir()
    monkeypatch.delenv("GRAPHDIST_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "graphdist"
    monkeypatch.delenv("GRAPHDIST_DATA")
    assert dataset_dirs() == []


def small_npz(path: Path, n: int = 4) -> None:
    src = np.arange(n - 1)
    np.savez(path, edge_index=np.stack([np.r_[src, src + 1], np.r_[src + 1, src]]),
             x=np.eye(n, dtype=np.float32), y=np.arange(n) % 2)


def test_named_lookup_prefers_data_dirs_in_order_then_the_cache(monkeypatch, tmp_path):
    first, second, cache = tmp_path / "first", tmp_path / "second", tmp_path / "cache"
    for d in (first, second, cache):
        d.mkdir()
    small_npz(second / "cora.npz", n=4)
    small_npz(cache / "cora.npz", n=6)
    monkeypatch.setenv("GRAPHDIST_DATA", f"{first}{os.pathsep}{second}")
    monkeypatch.setenv("GRAPHDIST_CACHE", str(cache))
    assert find_dataset("cora") == second / "cora.npz"
    assert load_graph("cora").num_nodes == 4
    (second / "cora.npz").unlink()
    assert load_graph("cora").num_nodes == 6  # falls back to the cache


def offline(monkeypatch, tmp_path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("GRAPHDIST_DATA", str(empty))
    monkeypatch.delenv("GRAPHDIST_OFFLINE", raising=False)
    return empty


def test_offline_lookup_fails_fast_saying_where_it_looked(monkeypatch, tmp_path):
    empty = offline(monkeypatch, tmp_path)
    calls = []
    monkeypatch.setattr(planetoid, "_network_reachable", lambda *a, **k: calls.append(a) or False)
    monkeypatch.setattr(planetoid, "_download_planetoid", lambda *a: pytest.fail("must not download offline"))
    with pytest.raises(FileNotFoundError) as info:
        load_graph("pubmed")
    message = str(info.value)
    assert "Dataset 'pubmed' not found" in message
    assert f"GRAPHDIST_DATA ({empty})" in message and str(cache_dir()) in message
    assert "network is unreachable" in message and "Set GRAPHDIST_DATA" in message
    assert len(calls) == 1


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_download_can_be_disabled(monkeypatch, tmp_path, how):
    offline(monkeypatch, tmp_path)
    monkeypatch.setattr(planetoid, "_network_reachable", lambda *a, **k: pytest.fail("must not probe"))
    if how == "environment":
        monkeypatch.setenv("GRAPHDIST_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="downloading is disabled"):
        load_graph("cora", download=how != "argument")


def test_failed_download_is_reported_with_its_cause(monkeypatch, tmp_path):
    offline(monkeypatch, tmp_path)
    monkeypatch.setattr(planetoid, "_network_reachable", lambda *a, **k: True)

    def broken(name, root):
        raise OSError("connection reset")

    monkeypatch.setattr(planetoid, "_download_planetoid", broken)
    with pytest.raises(FileNotFoundError, match=re.escape("downloading it failed (OSError: connection reset)")):
        load_graph("citeseer")
    assert not (cache_dir() / "citeseer.npz").exists()


def test_downloaded_dataset_is_converted_into_the_cache_once(monkeypatch, tmp_path):
    from torch_geometric.data import Data

    offline(monkeypatch, tmp_path)
    monkeypatch.setattr(planetoid, "_network_reachable", lambda *a, **k: True)
    downloads = []

    def fake(name, root):
        downloads.append((name, root))
        n = 5
        return Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), x=torch.rand(n, 3),
                    y=torch.arange(n) % 2, train_mask=torch.arange(n) < 2, val_mask=torch.arange(n) == 2,
                    test_mask=torch.arange(n) > 2)

    monkeypatch.setattr(planetoid, "_download_planetoid", fake)
    g = load_graph("cora")
    assert (g.num_nodes, g.num_edges, int(g.train_mask.sum())) == (5, 4, 2)
    assert (cache_dir() / "cora.npz").is_file()
    assert downloads == [("cora", cache_dir() / "pyg")]
    assert load_graph("cora").num_nodes == 5 and len(downloads) == 1  # the cache answers now
    assert not list(cache_dir().glob(".*tmp"))


def test_network_probe_gives_up_quickly_on_an_unroutable_address():
    # 192.0.2.0/24 is TEST-NET-1: never routed, so the probe must return False.
    assert planetoid._network_reachable("192.0.2.1", 9, timeout=0.5) is False


def test_synthetic_names():
    g = load_graph("synthetic-2500")
    assert g.num_nodes == 2500 and g.num_features == 100 and g.name == "synthetic-2500"
    assert load_graph("synthetic-3k").num_nodes == 3000


@pytest.mark.parametrize("name", ["coraa", "ogbn-arxive", "synthetic-", "synthetic-abc", "synthetic-0"])
def test_unknown_names_list_the_known_ones_and_the_formats(name):
    with pytest.raises(ValueError) as info:
        load_graph(name)
    message = str(info.value)
    assert f"Unknown dataset {name!r}" in message
    for part in ("cora", "citeseer", "pubmed", "ogbn-arxiv", "ogbn-papers100M", "synthetic-<N>", ".npz", "OGB",
                 "edge-list"):
        assert part in message


def test_missing_paths_raise_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'nope.npz'}: no such file or directory")):
        load_graph(tmp_path / "nope.npz")
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        load_graph(str(tmp_path / "graphs" / "cora"))


def test_unrecognised_inputs(tmp_path):
    (tmp_path / "notes.json").write_text("{}")
    with pytest.raises(ValueError, match=re.escape("unrecognised file type '.json'")):
        load_graph(tmp_path / "notes.json")
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(ValueError, match="got a directory with none of raw/edge.csv.gz"):
        load_graph(tmp_path / "emptydir")
    with pytest.raises(ValueError, match="name_or_path: expected a str, path, Graph or torch_geometric Data"):
        load_graph(42)


# ------------------------------------------------------------------ .npz
def test_npz_dense_and_csr_features_give_the_same_graph(tmp_path):
    n = 6
    rng = np.random.default_rng(0)
    x = (rng.random((n, 5)) < 0.4).astype(np.float32) * rng.random((n, 5), dtype=np.float32)
    x[3] = 0  # an all-zero row
    edge_index = np.array([[0, 1, 2, 5], [1, 0, 5, 2]])
    common = dict(edge_index=edge_index, y=np.array([0, 1, 0, 1, -1, 2]), train_mask=np.arange(n) < 3,
                  val_mask=np.arange(n) == 3, test_mask=np.arange(n) == 5)
    np.savez_compressed(tmp_path / "dense.npz", x=x, **common)
    rows, cols = np.nonzero(x)
    np.savez_compressed(tmp_path / "sparse.npz", x_indptr=np.r_[0, np.cumsum(np.bincount(rows, minlength=n))],
                        x_indices=cols, x_data=x[rows, cols], x_shape=np.array([n, 5]), **common)
    dense, sparse = load_graph(tmp_path / "dense.npz"), load_graph(tmp_path / "sparse.npz")
    assert dense.name == "dense"
    assert torch.equal(dense.x, torch.from_numpy(x)) and torch.equal(sparse.x, dense.x)
    assert edge_set(dense.edge_index()) == edge_set(edge_index)
    for field in ("indptr", "indices", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(dense, field), getattr(sparse, field)), field


def test_uncompressed_npz_features_are_memory_mapped_and_scanned_once(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(tmp_path / "g.npz", edge_index=np.array([[0, 1], [1, 0]]), x=x)
    mapped = npz_reader._npz_member_memmap(tmp_path / "g.npz", "x")
    assert isinstance(mapped, np.memmap) and np.array_equal(mapped, x)
    assert torch.equal(load_graph(tmp_path / "g.npz").x, torch.from_numpy(x))
    np.savez_compressed(tmp_path / "c.npz", x=x)
    assert npz_reader._npz_member_memmap(tmp_path / "c.npz", "x") is None  # deflated: read normally
    x[2, 1] = np.inf
    np.savez(tmp_path / "bad.npz", edge_index=np.array([[0, 1], [1, 0]]), x=x)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'bad.npz'}: x: features must be finite (got NaN or inf in row 2)")):
        load_graph(tmp_path / "bad.npz")


def test_npz_without_features_takes_the_node_count_from_the_edges(tmp_path):
    np.savez(tmp_path / "bare.npz", edge_index=np.array([[0, 3], [3, 0]]))
    g = load_graph(tmp_path / "bare.npz")
    assert g.num_nodes == 4 and g.x is None and g.y is None


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": np.zeros((2, 2), np.float32)}, "expected key 'edge_index' (got keys ['x'])"),
        ({"edge_index": np.zeros((3, 2), np.int64)}, "edge_index: expected shape [2, E] (got (3, 2))"),
        ({"edge_index": np.zeros((2, 2), np.float32)}, "edge_index: expected integer node ids (got dtype float32)"),
        ({"edge_index": np.array([[0, -1], [1, 0]])}, "edge_index: expected node ids >= 0 (got -1)"),
        ({"edge_index": np.array([[0, 3], [1, 0]]), "x": np.zeros((3, 2), np.float32)},
         "edge_index: node ids must lie in [0, 3) (got 3)"),
        ({"edge_index": np.array([[0], [1]]), "x": np.zeros(3, np.float32)}, "expected x of shape [N, F] (got (3,))"),
        ({"edge_index": np.array([[0], [1]]), "x": np.zeros((2, 2)), "y": np.array([0.5, 1.0])},
         "y: expected integer labels (-1 = unlabelled) (got dtype float64)"),
        ({"edge_index": np.array([[0], [1]]), "x": np.zeros((2, 2)), "train_mask": np.array([True, False, True])},
         "train_mask: expected shape [2] (got (3,))"),
        ({"edge_index": np.array([[0], [1]]), "x_indptr": np.array([0, 1])},
         "CSR features need x_indptr, x_indices, x_data and x_shape (missing ['x_indices', 'x_data', 'x_shape'])"),
        ({"edge_index": np.array([[0], [1]]), "x_indptr": np.array([0, 1]), "x_indices": np.array([0]),
          "x_data": np.array([1.0]), "x_shape": np.array([2, 2])}, "expected x_indptr of length N + 1 = 3 (got shape (2,))"),
        ({"edge_index": np.array([[0], [1]]), "x_indptr": np.array([0, 1, 1]), "x_indices": np.array([4]),
          "x_data": np.array([1.0]), "x_shape": np.array([2, 2])}, "expected x_indices in [0, 2) (got 4..4)"),
        ({"edge_index": np.array([[0], [1]]), "x_indptr": np.array([0, 0, 1]), "x_indices": np.array([1]),
          "x_data": np.array([np.nan]), "x_shape": np.array([2, 2])}, "x: features must be finite (got NaN or inf in row 1)"),
    ],
)
def test_npz_errors_name_the_file_and_key(tmp_path, arrays, message):
    path = tmp_path / "broken.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
        load_graph(path)


def test_a_corrupt_npz_is_a_clear_error(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="expected a numpy .npz archive"):
        load_graph(tmp_path / "junk.npz")
