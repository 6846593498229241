"""load_graph on OGB directories, PyG inputs (objects and saved datasets) and edge lists, and their errors."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.data.loaders import load_graph, read_table
from graphdist.data.readers import text as text_reader


def edge_set(edge_index) -> set[tuple[int, int]]:
    return set(map(tuple, np.asarray(edge_index).T.tolist()))


def write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


# ------------------------------------------------------------------ OGB directories
def write_ogb_csv(root: Path, edges: np.ndarray, n: int, feat: np.ndarray, labels: list, splits: dict) -> None:
    raw = root / "raw"
    write_gz(raw / "edge.csv.gz", "".join(f"{s},{d}\n" for s, d in edges))
    write_gz(raw / "num-node-list.csv.gz", f"{n}\n")
    write_gz(raw / "num-edge-list.csv.gz", f"{len(edges)}\n")
    write_gz(raw / "node-feat.csv.gz", "".join(",".join(f"{v:.6g}" for v in row) + "\n" for row in feat))
    write_gz(raw / "node-label.csv.gz", "".join(f"{v}\n" for v in labels))
    for kind, parts in splits.items():
        for part, ids in parts.items():
            write_gz(root / "split" / kind / f"{part}.csv.gz", "".join(f"{i}\n" for i in ids))


OGB_EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 2]])
OGB_SPLIT = {"time": {"train": [0, 1], "valid": [2], "test": [3, 4]}}


def test_ogb_csv_directory(tmp_path):
    root = tmp_path / "ogbn_arxiv"
    feat = np.arange(10, dtype=np.float32).reshape(5, 2) / 4
    write_ogb_csv(root, OGB_EDGES, 5, feat, [1, 0, "nan", 2, 1], OGB_SPLIT)  # node 4 is isolated
    g = load_graph(root)
    assert g.name == "ogbn-arxiv"
    assert g.num_nodes == 5 and g.num_edges == 4  # arxiv is directed: stored as is
    assert edge_set(g.edge_index()) == edge_set(OGB_EDGES.T)
    assert g.degrees().tolist() == [1, 1, 2, 0, 0]
    assert torch.allclose(g.x, torch.from_numpy(feat))
    assert g.y.tolist() == [1, 0, -1, 2, 1]  # NaN = unlabelled
    assert g.train_mask.tolist() == [True, True, False, False, False]
    assert g.val_mask.tolist() == [False, False, True, False, False]
    assert g.test_mask.tolist() == [False, False, False, True, True]


def test_ogb_undirected_datasets_get_their_inverse_edges(tmp_path):
    root = tmp_path / "ogbn_products"
    write_ogb_csv(root, OGB_EDGES, 5, np.zeros((5, 1)), [0] * 5, {"sales_ranking": {"train": [0]}})
    g = load_graph(root)
    assert g.num_edges == 8
    assert edge_set(g.edge_index()) == edge_set(OGB_EDGES.T) | edge_set(OGB_EDGES.T[::-1])
    assert load_graph(root, add_inverse_edge=False).num_edges == 4
    assert g.val_mask is None  # only train was given


def test_ogb_binary_directory(tmp_path):
    root = tmp_path / "ogbn_papers100M"
    (root / "raw").mkdir(parents=True)
    feat = np.random.default_rng(0).random((5, 3)).astype(np.float32)
    # papers100M's data.npz is uncompressed: its node_feat is memory-mapped, not read.
    np.savez(root / "raw" / "data.npz", edge_index=OGB_EDGES.T.copy(), node_feat=feat,
             num_nodes_list=np.array([5]), num_edges_list=np.array([4]))
    np.savez_compressed(root / "raw" / "node-label.npz", node_label=np.array([[3.0], [np.nan], [1.0], [0.0], [np.nan]]))
    for part, ids in OGB_SPLIT["time"].items():
        write_gz(root / "split" / "time" / f"{part}.csv.gz", "".join(f"{i}\n" for i in ids))
    g = load_graph(root)
    assert g.name == "ogbn-papers100M"
    assert (g.num_nodes, g.num_edges) == (5, 4)
    assert torch.equal(g.x, torch.from_numpy(feat))
    assert g.y.tolist() == [3, -1, 1, 0, -1]
    assert int(g.train_mask.sum()) == 2 and int(g.test_mask.sum()) == 2


def test_ogb_errors(tmp_path):
    root = tmp_path / "ogbn_x"
    write_ogb_csv(root, OGB_EDGES, 5, np.zeros((4, 1)), [0] * 5, {"a": {"train": [0]}, "b": {"train": [1]}})
    with pytest.raises(ValueError, match=re.escape("expected 5 feature rows, one per node (got 4)")):
        load_graph(root)
    write_gz(root / "raw" / "node-feat.csv.gz", "0\n" * 5)
    with pytest.raises(ValueError, match=re.escape("expected one split folder or split=<name> (got ['a', 'b'])")):
        load_graph(root)
    assert load_graph(root, split="b").train_mask.tolist() == [False, True, False, False, False]
    with pytest.raises(ValueError, match=re.escape("expected split='c' to be one of ['a', 'b']")):
        load_graph(root, split="c")
    write_gz(root / "raw" / "node-label.csv.gz", "0,1\n" * 5)
    with pytest.raises(ValueError, match="expected one label column"):
        load_graph(root, split="a")
    write_gz(root / "raw" / "node-label.csv.gz", "0\n" * 5)
    write_gz(root / "split" / "a" / "train.csv.gz", "7\n")
    with pytest.raises(ValueError, match=re.escape("train.csv.gz: expected node ids in [0, 5) (got 7..7)")):
        load_graph(root, split="a")
    (root / "raw" / "num-node-list.csv.gz").unlink()
    with pytest.raises(ValueError, match="num-node-list.csv.gz next to"):
        load_graph(root)


def test_heterogeneous_ogb_without_relations_is_refused(tmp_path):
    # ogbn-mag's layout is read (tests/data/test_typed_readers.py); one without relations is refused
    write_gz(tmp_path / "ogbn_mag" / "raw" / "num-node-dict.csv.gz", "paper\n1\n")
    with pytest.raises(ValueError, match="expected at least one relation"):
        load_graph(tmp_path / "ogbn_mag")


# ------------------------------------------------------------------ PyG inputs
def test_pyg_data_object():
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), x=torch.ones(3, 2), y=torch.tensor([0, 1, 0]))
    g = load_graph(data)
    assert (g.num_nodes, g.num_edges) == (3, 3) and edge_set(g.edge_index()) == {(0, 1), (1, 2), (2, 0)}
    assert load_graph(g) is g


def test_heterogeneous_pyg_data_is_refused():
    from torch_geometric.data import HeteroData

    with pytest.raises(ValueError, match=re.escape("expected a homogeneous torch_geometric Data (got HeteroData)")):
        load_graph(HeteroData())


def test_arguments_that_do_not_apply_warn(tmp_path):
    with pytest.warns(UserWarning, match=re.escape("features, split ignored")):
        g = load_graph("synthetic-100", features=np.zeros((100, 2)), split="time")
    assert g.num_features == 100
    (tmp_path / "e.csv").write_text("0,1\n")
    with pytest.warns(UserWarning, match="add_inverse_edge ignored"):
        load_graph(tmp_path / "e.csv", add_inverse_edge=True)


def test_saved_pyg_dataset_directory(tmp_path):
    from torch_geometric.data import Data, InMemoryDataset

    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), x=torch.rand(3, 4), y=torch.tensor([2, 0, 1]),
                train_mask=torch.tensor([True, False, False]))
    (tmp_path / "MyGraph" / "processed").mkdir(parents=True)
    InMemoryDataset.save([data], str(tmp_path / "MyGraph" / "processed" / "data.pt"))
    g = load_graph(tmp_path / "MyGraph")
    assert (g.num_nodes, g.num_edges, g.num_features) == (3, 2, 4)
    assert torch.equal(g.x, data.x) and g.train_mask.tolist() == [True, False, False]
    # Several graphs are a graph-classification dataset, not one graph to partition.
    InMemoryDataset.save([data, data], str(tmp_path / "MyGraph" / "processed" / "data.pt"))
    with pytest.raises(ValueError, match="holds 2 graphs; expected one node-property graph"):
        load_graph(tmp_path / "MyGraph")
    torch.save({"not": "a dataset"}, tmp_path / "MyGraph" / "processed" / "data.pt")
    with pytest.raises(ValueError, match="could not open this directory offline|expected a saved PyG dataset"):
        load_graph(tmp_path / "MyGraph")


# ------------------------------------------------------------------ edge lists
EDGES_TEXT = "# a comment\nsrc,dst\n0,1\n1,2\n  # indented comment\n2,0\n\n3,1\n"


@pytest.mark.parametrize(
    "filename, text",
    [
        ("g.csv", EDGES_TEXT),
        ("g.tsv", EDGES_TEXT.replace(",", "\t")),
        ("g.txt", EDGES_TEXT.replace(",", " ").replace("src dst\n", "")),
        ("g.edges", EDGES_TEXT.replace(",", ";").replace("\n", "\r\n")),
        ("g.csv.gz", EDGES_TEXT),
        ("g.csv", "0,1,0.5\n1,2,1.5\n2,0,2.0\n3,1,1\n"),  # a weight column is ignored
    ],
)
def test_edge_list_formats(tmp_path, filename, text):
    path = tmp_path / filename
    if filename.endswith(".gz"):
        write_gz(path, text)
    else:
        path.write_bytes(text.encode())
    g = load_graph(path)
    assert g.name == "g"
    assert g.num_nodes == 4 and edge_set(g.edge_index()) == {(0, 1), (1, 2), (2, 0), (3, 1)}


def test_edge_list_with_feature_and_label_files(tmp_path):
    (tmp_path / "e.csv").write_text("0,1\n1,0\n")
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "y.txt").write_text("0\n1\n1\n0\n2\n")
    g = load_graph(tmp_path / "e.csv", features=tmp_path / "x.npy", labels=tmp_path / "y.txt")
    assert g.num_nodes == 5  # isolated nodes 2-4 come from the feature rows
    assert torch.equal(g.x, torch.from_numpy(x)) and g.y.tolist() == [0, 1, 1, 0, 2]
    (tmp_path / "x.csv").write_text("# features\n" + "".join(f"{a},{b}\n" for a, b in x))
    g2 = load_graph(tmp_path / "e.csv", features=tmp_path / "x.csv", labels=np.array([0, 1, 1, 0, 2]))
    assert torch.equal(g2.x, g.x) and torch.equal(g2.y, g.y)
    assert load_graph(tmp_path / "e.csv", num_nodes=7).num_nodes == 7


def test_edge_list_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0,1\n1,x\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}: expected integers separated by commas, tabs or spaces (got 'x')")):
        load_graph(bad)
    bad.write_text("0,1\n1,2,3\n")
    with pytest.raises(ValueError, match="expected 2 columns on every line"):
        load_graph(bad)
    bad.write_text("0\n1\n")
    with pytest.raises(ValueError, match=re.escape("expected at least two columns, src and dst (got 1)")):
        load_graph(bad)
    bad.write_text("0,-1\n")
    with pytest.raises(ValueError, match=re.escape("expected node ids >= 0 (got -1)")):
        load_graph(bad)
    bad.write_text("0,4\n")
    with pytest.raises(ValueError, match=re.escape("edge_index: node ids must lie in [0, 3) (got 4)")):
        load_graph(bad, num_nodes=3)
    bad.write_text("0,1\n")
    with pytest.raises(ValueError, match=re.escape("expected the same number of rows (got 3 and 2)")):
        load_graph(bad, features=np.zeros((3, 1), np.float32), labels=np.array([0, 1]))
    with pytest.raises(FileNotFoundError, match="features: .*missing.npy: no such file"):
        load_graph(bad, features=tmp_path / "missing.npy")
    with pytest.raises(ValueError, match=re.escape("features: x: features must be finite (got NaN or inf in row 1)")):
        load_graph(bad, features=np.array([[0.0], [np.nan]], np.float32))


def test_read_table_handles_chunk_boundaries(tmp_path, monkeypatch):
    monkeypatch.setattr(text_reader, "_TEXT_CHUNK", 7)  # forces many chunks cut mid-line
    rows = [(i, i * 3 + 1) for i in range(50)]
    (tmp_path / "t.csv").write_text("a,b\n# c\n" + "".join(f"{a},{b}\n" for a, b in rows))
    table = read_table(tmp_path / "t.csv", np.int64, allow_header=True)
    assert table.tolist() == [list(r) for r in rows]
    (tmp_path / "empty.csv").write_text("# nothing\n")
    assert read_table(tmp_path / "empty.csv", np.int64, columns=2).shape == (0, 2)
