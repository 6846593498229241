"""The OGB names (ogbn-arxiv, ogbn-products, ogbn-papers100M): where they resolve, the download, the memory check.

Every test works on tiny folders in OGB's own layout written here; the download is served from a
``file://`` URL, and where a download would otherwise happen ``GRAPHDIST_OGB_URL`` points at a
folder that does not exist, so no test touches the network.
"""

from __future__ import annotations

import gzip
import io
import logging
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.data import Graph, load_graph
from graphdist.data import download as download_module
from graphdist.data.loaders import KNOWN_NAMES, source_key
from graphdist.data.readers import ogb_names
from graphdist.data.readers.ogb_names import NotEnoughMemory, drop_duplicate_edges

N = 50
SPLIT = {"train": range(0, 30), "valid": range(30, 40), "test": range(40, 50)}


def _edges(n: int = N, seed: int = 0) -> np.ndarray:
    """A directed ``[E, 2]`` list with a reciprocal pair, a duplicate and a self loop: what dedup must handle."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, n, size=(4 * n, 2))
    return np.concatenate([edges, [[1, 2], [2, 1], [3, 4], [3, 4], [5, 5]]])


def _gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(",".join(str(v) for v in np.atleast_1d(row)) + "\n" for row in rows))


def write_arxiv(folder: Path, n: int = N, seed: int = 0) -> np.ndarray:
    """``folder`` in OGB's text layout (as ``arxiv.zip`` unpacks): features ``x[i] = i``, split/time. Returns the edges."""
    edges = _edges(n, seed)
    raw = folder / "raw"
    _gz(raw / "edge.csv.gz", edges)
    _gz(raw / "num-node-list.csv.gz", [n])
    _gz(raw / "num-edge-list.csv.gz", [len(edges)])
    _gz(raw / "node-feat.csv.gz", np.arange(n)[:, None].repeat(4, 1))
    _gz(raw / "node-label.csv.gz", np.arange(n) % 4)
    for part, ids in SPLIT.items():
        _gz(folder / "split" / "time" / f"{part}.csv.gz", [i for i in ids if i < n])
    return edges


def write_papers(folder: Path, n: int = N) -> np.ndarray:
    """``folder`` in OGB's binary layout (papers100M-bin.zip): raw/data.npz + raw/node-label.npz."""
    edges = _edges(n)
    (folder / "raw").mkdir(parents=True)
    np.savez(folder / "raw" / "data.npz", edge_index=edges.T.copy(), num_nodes_list=np.array([n]),
             num_edges_list=np.array([len(edges)]), node_feat=np.ones((n, 4), np.float32))
    np.savez_compressed(folder / "raw" / "node-label.npz", node_label=(np.arange(n) % 3).astype(np.float64)[:, None])
    for part, ids in SPLIT.items():
        _gz(folder / "split" / "time" / f"{part}.csv.gz", list(ids))
    return edges


def edge_set(graph: Graph) -> set[tuple[int, int]]:
    return set(map(tuple, graph.edge_index().T.tolist()))


def undirected(edges: np.ndarray) -> set[tuple[int, int]]:
    return {(int(s), int(d)) for s, d in edges} | {(int(d), int(s)) for s, d in edges}


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty GRAPHDIST_DATA, and a download URL that fails at once (a missing file://, no network)."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("GRAPHDIST_DATA", str(data))
    monkeypatch.setenv(ogb_names.OGB_URL_ENV, (tmp_path / "no-server").as_uri())
    monkeypatch.delenv("GRAPHDIST_OFFLINE", raising=False)
    return data


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A folder served as GRAPHDIST_OGB_URL holding arxiv.zip (arxiv/ as OGB's zip has it), and its edges."""
    site = tmp_path / "site"
    write_arxiv(site / "arxiv")
    with zipfile.ZipFile(site / "arxiv.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted((site / "arxiv").rglob("*")):
            zf.write(file, file.relative_to(site).as_posix())
    monkeypatch.setenv(ogb_names.OGB_URL_ENV, site.as_uri())
    return site


def cache() -> Path:
    return ogb_names.cache_dir()


# ------------------------------------------------------------------ resolution
def test_ogbn_arxiv_from_graphdist_data_is_undirected_with_ogbs_split(data_dir):
    edges = write_arxiv(data_dir / "ogbn_arxiv")
    g = load_graph("ogbn-arxiv")
    assert (g.name, g.num_nodes, g.num_features) == ("ogbn-arxiv", N, 4)
    assert edge_set(g) == undirected(edges)  # every reverse added ...
    assert g.num_edges == len(undirected(edges))  # ... and every duplicate dropped (1-2 twice, 3-4 twice, 5-5)
    assert torch.equal(g.x[:, 0], torch.arange(N, dtype=torch.float32))
    assert g.y.tolist() == (np.arange(N) % 4).tolist()
    assert torch.equal(g.train_mask.nonzero().flatten(), torch.arange(30))
    assert torch.equal(g.val_mask.nonzero().flatten(), torch.arange(30, 40))
    assert torch.equal(g.test_mask.nonzero().flatten(), torch.arange(40, 50))
    assert load_graph("OGBN-Arxiv").num_edges == g.num_edges  # names are case-insensitive
    assert not (cache() / "ogbn_arxiv").exists()  # found locally: nothing downloaded


def test_graphdist_data_first_then_the_cache(data_dir):
    write_arxiv(data_dir / "ogbn_arxiv", n=N)
    write_arxiv(cache() / "ogbn_arxiv", n=N - 10, seed=1)
    assert load_graph("ogbn-arxiv").num_nodes == N
    assert source_key("ogbn-arxiv") not in ("missing", source_key(str(cache() / "ogbn_arxiv")))
    (data_dir / "ogbn_arxiv" / "raw" / "edge.csv.gz").unlink()  # a folder without its graph does not count
    assert load_graph("ogbn-arxiv").num_nodes == N - 10


def test_the_split_argument_and_the_names_in_the_unknown_dataset_message(data_dir):
    write_arxiv(data_dir / "ogbn_arxiv")
    with pytest.raises(ValueError, match=re.escape("expected split='random' to be one of ['time']")):
        load_graph("ogbn-arxiv", split="random")
    with pytest.warns(UserWarning, match="add_inverse_edge ignored"):
        load_graph("ogbn-arxiv", add_inverse_edge=False)
    with pytest.raises(ValueError, match="Unknown dataset 'ogbn-arxiv2'") as info:
        load_graph("ogbn-arxiv2")
    assert all(name in str(info.value) for name in ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M"))
    assert {"ogbn-arxiv", "ogbn-products", "ogbn-papers100M"} <= set(KNOWN_NAMES)


# ------------------------------------------------------------------ download
def test_download_from_a_file_url_unpacks_into_the_cache_in_one_rename(data_dir, served, caplog):
    with caplog.at_level(logging.INFO, logger="graphdist.data"):
        g = load_graph("ogbn-arxiv")
    assert g.num_nodes == N and g.train_mask.sum() == 30
    assert sorted(p.name for p in cache().iterdir()) == ["ogbn_arxiv"]  # no zip, no work folder left
    assert (cache() / "ogbn_arxiv" / "raw" / "edge.csv.gz").is_file()
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("downloading arxiv.zip")]
    assert progress and "(100%)" in progress[-1], progress
    assert any("needs about" in r.getMessage() for r in caplog.records)  # the memory estimate is stated
    (served / "arxiv.zip").unlink()
    assert load_graph("ogbn-arxiv").num_edges == g.num_edges  # the cache answers now


def test_a_truncated_zip_is_refused_and_leaves_nothing(data_dir, served):
    whole = (served / "arxiv.zip").read_bytes()
    (served / "arxiv.zip").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(FileNotFoundError, match="arxiv.zip is no valid zip archive") as info:
        load_graph("ogbn-arxiv")
    assert (served / "arxiv.zip").as_uri() in str(info.value)
    assert list(cache().iterdir()) == []


def test_a_wrong_size_is_refused_and_leaves_nothing(data_dir, served, monkeypatch):
    size = (served / "arxiv.zip").stat().st_size
    spec = ogb_names.OGB_DATASETS["ogbn-arxiv"]
    monkeypatch.setitem(ogb_names.OGB_DATASETS, "ogbn-arxiv", replace(spec, archive_bytes=size + 1))
    with pytest.raises(FileNotFoundError, match=f"announces {size:,} bytes, expected {size + 1:,}"):
        load_graph("ogbn-arxiv")
    assert list(cache().iterdir()) == []


def test_a_connection_that_ends_early_is_refused_and_leaves_nothing(data_dir, served, monkeypatch):
    # file:// cannot cut a transfer short; a response that promises more than it sends can.
    payload = (served / "arxiv.zip").read_bytes()

    class Short(io.BytesIO):
        headers = {"Content-Length": str(len(payload) + 100)}

    monkeypatch.setattr(download_module.urllib.request, "urlopen", lambda *a, **k: Short(payload))
    with pytest.raises(FileNotFoundError, match=f"truncated: {len(payload):,} of {len(payload) + 100:,} bytes"):
        load_graph("ogbn-arxiv")
    assert list(cache().iterdir()) == []


def test_a_crash_while_unpacking_leaves_nothing_that_looks_complete(data_dir, served, monkeypatch):
    real = zipfile.ZipFile.extractall

    def dies_halfway(self, path=None, members=None, pwd=None):
        real(self, path, members[: len(members) // 2], pwd)  # half the files are on disk ...
        raise OSError(5, "Input/output error")  # ... when the disk gives up

    monkeypatch.setattr(zipfile.ZipFile, "extractall", dies_halfway)
    with pytest.raises(FileNotFoundError, match=r"failed \(unpacking into .* failed: Input/output error\)"):
        load_graph("ogbn-arxiv")
    assert list(cache().iterdir()) == []
    monkeypatch.setattr(zipfile.ZipFile, "extractall", real)
    assert load_graph("ogbn-arxiv").num_nodes == N  # the next run starts afresh


def test_no_data_and_no_server_is_one_line_naming_the_folders_and_the_url(data_dir, tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_graph("ogbn-products")
    message = str(info.value)
    url = f"{(tmp_path / 'no-server').as_uri()}/products.zip"
    assert "\n" not in message
    for part in (str(data_dir / "ogbn_products"), str(cache() / "ogbn_products"), f"the download from {url} failed",
                 "No such file or directory", "unzip it into a GRAPHDIST_DATA folder", "rename products/ to ogbn_products/"):
        assert part in message, part
    assert not any(p.name.endswith(".partial") for p in cache().iterdir())


def test_offline_says_so_and_does_not_try(data_dir, monkeypatch):
    monkeypatch.setenv("GRAPHDIST_OFFLINE", "1")
    monkeypatch.setattr(download_module.urllib.request, "urlopen", lambda *a, **k: pytest.fail("went online"))
    with pytest.raises(FileNotFoundError, match=r"downloading is disabled \(GRAPHDIST_OFFLINE\); download arxiv.zip"):
        load_graph("ogbn-arxiv")
    assert source_key("ogbn-arxiv") == "missing"


# ------------------------------------------------------------------ papers100M: binary layout, memory
def test_papers100m_binary_layout_and_the_memory_check(data_dir, monkeypatch, caplog):
    edges = write_papers(data_dir / "ogbn_papers100M")
    estimate = ogb_names.estimate_memory(data_dir / "ogbn_papers100M")
    assert estimate.mapped_bytes == N * 4 * 4  # node_feat stored uncompressed: mapped, not counted as needed
    assert estimate.needed_bytes >= len(edges) * 2 * 8 * 3  # at least the doubled list, its keys and their sort

    monkeypatch.setattr(ogb_names, "available_bytes", lambda: estimate.needed_bytes - 1)
    with pytest.raises(NotEnoughMemory) as info:
        load_graph("ogbn-papers100M")
    assert isinstance(info.value, ValueError)  # so the CLI reports it as one line (exit 2)
    message = str(info.value)
    assert message.startswith("ogbn-papers100M: loading needs about ") and "is available" in message
    assert ogb_names.human_bytes(estimate.needed_bytes - 1) in message

    monkeypatch.setattr(ogb_names, "available_bytes", lambda: 64 << 30)
    with caplog.at_level(logging.INFO, logger="graphdist.data"):
        g = load_graph("ogbn-papers100m")
    assert g.name == "ogbn-papers100M" and edge_set(g) == undirected(edges)
    assert g.y.tolist() == (np.arange(N) % 3).tolist() and int(g.train_mask.sum()) == 30
    assert any("needs about" in r.getMessage() and "64.0 GiB available" in r.getMessage() for r in caplog.records)


def test_the_table_follows_ogbs_master_csv(monkeypatch):
    monkeypatch.delenv(ogb_names.OGB_URL_ENV, raising=False)
    spec = ogb_names.OGB_DATASETS["ogbn-papers100M"]
    assert (spec.folder, spec.split) == ("ogbn_papers100M", "time")
    assert spec.url() == "http://snap.stanford.edu/ogb/data/nodeproppred/papers100M-bin.zip"
    assert ogb_names.OGB_DATASETS["ogbn-products"].split == "sales_ranking"
    monkeypatch.setenv(ogb_names.OGB_URL_ENV, "file:///mirror/ogb/")
    assert ogb_names.OGB_DATASETS["ogbn-arxiv"].url() == "file:///mirror/ogb/arxiv.zip"


# ------------------------------------------------------------------ undirected, the oracle
@pytest.mark.parametrize("seed", range(5))
def test_drop_duplicate_edges_equals_to_undirected(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    edges = rng.integers(0, n, size=(2, int(rng.integers(0, 120))))
    doubled = Graph.from_edge_index(np.concatenate([edges, edges[::-1]], axis=1), num_nodes=n)
    mine, oracle = drop_duplicate_edges(doubled), Graph.from_edge_index(edges, num_nodes=n).to_undirected()
    assert torch.equal(mine.indptr, oracle.indptr) and torch.equal(mine.indices, oracle.indices)


# ------------------------------------------------------------------ the CLI
def test_graphdist_train_dataset_ogbn_arxiv_trains(data_dir, tmp_path):
    from graphdist.cli.train import main

    write_arxiv(data_dir / "ogbn_arxiv", n=120)
    run = tmp_path / "run"
    assert main(["--dataset", "ogbn-arxiv", "--num-workers", "1", "--epochs", "1", "--hidden", "8",
                 "--fanouts", "3,3", "--batch-size", "32", "--log-interval", "1000", "--timeout", "30",
                 "--run-dir", str(run)]) == 0
    assert (run / "metrics.jsonl").read_text().count("\n") == 1
    assert any(p.name.startswith("ogbn-arxiv-") for p in (cache() / "partitions").iterdir())
