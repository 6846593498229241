"""Typed graphs from files: the typed .npz (readers/typed_npz.py), OGB's heterogeneous layout (ogbn-mag,
readers/ogb_hetero.py) and typed-cora (readers/typed_cora.py), each read by load_graph."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.data.hetero import typed_graph
from graphdist.data.loaders import load_graph, source_key
from graphdist.data.readers.registry import claim
from graphdist.data.readers.typed_npz import save_typed_npz, typed_arrays
from graphdist.testing.ogb_files import MAG_EDGES, write_gz, write_mag  # noqa: F401 - the tiny layout


def tiny_typed(target_first: bool = True):
    """paper (target, 3 features), author (featureless), topic (2 features); four relations, one within a type."""
    rng = np.random.default_rng(0)
    counts = {"paper": 6, "author": 4, "topic": 3}
    if not target_first:
        counts = {"author": 4, "paper": 6, "topic": 3}
    edges = {
        ("author", "writes", "paper"): [[0, 1, 1, 3, 2], [0, 0, 2, 5, 4]],
        ("paper", "cites", "paper"): [[0, 1, 2, 3, 5, 5], [1, 2, 0, 0, 4, 1]],
        ("paper", "has_topic", "topic"): [[0, 2, 4, 5], [0, 0, 1, 2]],
        ("topic", "rev_has_topic", "paper"): [[0, 0, 1, 2], [0, 2, 4, 5]],
    }
    x = {"paper": torch.arange(18, dtype=torch.float32).view(6, 3), "topic": torch.tensor(rng.random((3, 2)),
                                                                                            dtype=torch.float32)}
    masks = {"train_mask": torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.bool),
             "val_mask": torch.tensor([0, 0, 1, 1, 0, 0], dtype=torch.bool),
             "test_mask": torch.tensor([0, 0, 0, 0, 1, 1], dtype=torch.bool)}
    return typed_graph(counts, edges, x=x, y=torch.tensor([0, 1, 2, 1, -1, 0]), masks=masks, target="paper",
                       name="tiny")


def assert_same(a, b) -> None:
    assert a.schema == b.schema
    for field in ("indptr", "indices", "edge_type", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


# ------------------------------------------------------------------ the typed npz
def test_save_then_load_graph_gives_the_same_typed_graph(tmp_path):
    g = tiny_typed()
    back = load_graph(save_typed_npz(g, tmp_path / "tiny.npz"))
    assert_same(back, g)
    assert back.name == "tiny" and back.schema.widths == (3, 0, 2)
    assert claim(str(tmp_path / "tiny.npz"))[0].name == "npz"  # the npz reader, which hands it on


def test_a_target_stored_after_another_type_comes_back_first_with_the_same_arrays(tmp_path):
    g = tiny_typed(target_first=False)
    back = load_graph(save_typed_npz(g, tmp_path / "g.npz"))
    assert back.schema.node_types == ("paper", "author", "topic") != g.schema.node_types
    want, got = typed_arrays(g), typed_arrays(back)
    assert set(want) == set(got) and all(np.array_equal(want[k], got[k]) for k in want)


def test_types_are_ordered_target_first_then_as_their_keys_appear(tmp_path):
    path = tmp_path / "order.npz"
    np.savez(path, num_nodes__zeta=np.int64(2), x__alpha=np.ones((3, 2), np.float32), num_nodes__mid=np.int64(1),
             y__mid=np.array([4]), edge_index__zeta__r__alpha=np.array([[0, 1], [2, 0]]),
             edge_index__alpha__s__mid=np.array([[1], [0]]))
    g = load_graph(path)
    assert g.schema.node_types == ("mid", "zeta", "alpha") and g.schema.target == "mid"
    assert [r.key for r in g.schema.relations] == ["zeta__r__alpha", "alpha__s__mid"]
    assert g.y.tolist() == [4, -1, -1, -1, -1, -1]


GOOD = {"x__paper": np.ones((3, 2), np.float32), "num_nodes__author": np.int64(2), "y__paper": np.array([0, 1, 0]),
        "edge_index__author__writes__paper": np.array([[0, 1], [2, 2]])}
MALFORMED = [
    # (what changes, the key the message names, words it says)
    ({"edge_index__paper__cites__venue": np.array([[0], [0]])}, "edge_index__paper__cites__venue",
     "'venue' is not declared"),
    ({"num_nodes__author": None, "edge_index__author__writes__paper": np.array([[0], [0]])},
     "edge_index__author__writes__paper", "'author' is not declared"),
    ({"y__author": np.array([0, 0])}, "y__paper, y__author", "y__ on one node type"),
    ({"train_mask__paper": np.array([True, False])}, "train_mask__paper", "shape [3]"),
    ({"val_mask__author": np.array([True, False])}, "val_mask__author", "belongs to the labelled (target) type"),
    ({"edge_index": np.array([[0], [1]])}, "edge_index", "homogeneous key beside typed keys"),
    ({"x": np.ones((3, 1), np.float32)}, "x", "homogeneous key beside typed keys"),
    ({"feats__paper": np.ones(3)}, "feats__paper", "expected a typed key"),
    ({"edge_index__author__paper": np.array([[0], [0]])}, "edge_index__author__paper", "three names"),
    ({"x__paper": np.ones((3, 2), np.int64)}, "x__paper", "expected float"),
    ({"edge_index__author__writes__paper": np.array([[0.0], [1.0]])}, "edge_index__author__writes__paper",
     "expected integer ids"),
    ({"y__paper": np.array([0.0, 1.0, 0.0])}, "y__paper", "expected integer labels"),
    ({"test_mask__paper": np.array([1, 0, 1])}, "test_mask__paper", "expected bool"),
    ({"num_nodes__author": np.float64(2)}, "num_nodes__author", "integer scalar"),
    ({"num_nodes__paper": np.int64(4)}, "num_nodes__paper", "the rows of x__paper"),
    ({"edge_index__author__writes__paper": np.array([[0, 2], [0, 0]])}, "edge_index__author__writes__paper",
     "expected in [0, 2) (got 2)"),
    ({"edge_index__author__writes__paper": None}, "", "at least one edge_index__"),
    ({"x__paper": np.array([[1.0, np.nan]] * 3, np.float32)}, "x__paper", "finite"),
]


@pytest.mark.parametrize("change, key, words", MALFORMED, ids=[m[2] + " " + m[1] for m in MALFORMED])
def test_each_malformed_typed_npz_says_file_and_key_in_one_line(tmp_path, change, key, words):
    arrays = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError) as info:
        load_graph(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: {key}"), message
    assert words in message


def test_saving_a_homogeneous_graph_is_refused(tmp_path):
    from graphdist.data import Graph

    with pytest.raises(ValueError, match="expected a typed graph"):
        save_typed_npz(Graph.from_edge_index([[0], [1]]), tmp_path / "g.npz")


# ------------------------------------------------------------------ OGB's heterogeneous layout (ogbn-mag)
def relation_edges(g, key: str) -> set[tuple[int, int]]:
    s = g.schema
    r = s.relation_id(key)
    pick = g.edge_type.to(torch.int64) == r
    src_off, dst_off = s.offsets[s.type_id(s.relations[r].src)], s.offsets[s.type_id(s.relations[r].dst)]
    src, dst = g.indices[pick] - src_off, g.dst_of_edges()[pick] - dst_off
    return set(zip(src.tolist(), dst.tolist()))


def test_an_ogbn_mag_layout_reads_as_a_typed_graph_with_reverses(tmp_path):
    root = tmp_path / "ogbn_mag"
    feats = write_mag(root)
    assert claim(str(root))[0].name == "heterogeneous OGB directory"
    g = load_graph(root)
    s = g.schema
    assert g.name == "ogbn-mag" and s.target == "paper"
    assert s.node_types == ("paper", "author", "field_of_study", "institution") and s.widths == (3, 0, 0, 0)
    assert [r.key for r in s.relations] == [
        "author__affiliated_with__institution", "author__writes__paper", "paper__cites__paper",
        "paper__has_topic__field_of_study", "institution__rev_affiliated_with__author", "paper__rev_writes__author",
        "field_of_study__rev_has_topic__paper"]
    for triplet, (src, dst) in MAG_EDGES.items():
        stored = set(zip(src, dst))
        if triplet[0] == triplet[2]:  # cites: made symmetric, the pair stored both ways kept once
            assert relation_edges(g, "__".join(triplet)) == stored | {(d, c) for c, d in stored}
        else:
            assert relation_edges(g, "__".join(triplet)) == stored
            assert relation_edges(g, f"{triplet[2]}__rev_{triplet[1]}__{triplet[0]}") == {(d, c) for c, d in stored}
    assert g.num_edges == 3 + 5 + 8 + 3 + 3 + 5 + 3
    assert torch.equal(g.x[:5], torch.from_numpy(feats)) and not g.x[5:].any()
    assert g.y[:5].tolist() == [3, 0, 2, 2, 1] and (g.y[5:] == -1).all()
    assert g.train_mask.nonzero().view(-1).tolist() == [0, 1] and g.val_mask.nonzero().view(-1).tolist() == [2]
    assert g.test_mask.nonzero().view(-1).tolist() == [3, 4]


def test_an_ogbn_mag_layout_as_stored_and_its_errors(tmp_path):
    root = tmp_path / "ogbn_mag"
    write_mag(root)
    g = load_graph(root, add_inverse_edge=False)
    assert g.schema.num_relations == 4 and g.num_edges == 3 + 5 + 5 + 3
    with pytest.raises(ValueError, match=re.escape("expected split='year' to be one of ['time']")):
        load_graph(root, split="year")
    writes = root / "raw" / "relations" / "author___writes___paper"
    write_gz(writes / "edge.csv.gz", "0,0\n4,1\n")
    with pytest.raises(ValueError, match=re.escape("num-edge-list.csv.gz: expected one count equal to edge.csv.gz's "
                                                   "2 rows (got [5])")):
        load_graph(root)
    write_gz(writes / "num-edge-list.csv.gz", "2\n")
    with pytest.raises(ValueError, match=re.escape("writes___paper/edge.csv.gz: column 1 holds author ids, "
                                                   "expected in [0, 4) (got 4)")):
        load_graph(root)
    (root / "raw" / "num-node-dict.csv.gz").unlink()
    with pytest.raises(ValueError, match="heterogeneous OGB directory .* needs .*num-node-dict.csv.gz"):
        load_graph(root)


# ------------------------------------------------------------------ typed-cora
def test_typed_cora_is_papers_and_their_words(dataset_path):
    dataset_path("cora")  # the shared data: skipped where absent (failed under CI=true)
    cora, g = load_graph("cora"), load_graph("typed-cora")
    s = g.schema
    assert s.node_types == ("paper", "word") and s.target == "paper" and s.featureless == ("word",)
    assert (s.num_nodes("paper"), s.num_nodes("word")) == (2708, 1433)
    counts = torch.bincount(g.edge_type.to(torch.int64), minlength=3).tolist()
    assert counts == [cora.num_edges, int((cora.x != 0).sum()), int((cora.x != 0).sum())]
    assert relation_edges(g, "contains") == set(map(tuple, (cora.x != 0).nonzero().tolist()))
    assert relation_edges(g, "in") == {(w, p) for p, w in relation_edges(g, "contains")}
    cites = relation_edges(g, "cites")
    assert cites == {(c, d) for d, c in cites}  # stored both ways: its own reverse
    assert torch.equal(g.x[:2708], cora.x) and torch.equal(g.y[:2708], cora.y)
    assert torch.equal(g.train_mask[:2708], cora.train_mask) and not g.train_mask[2708:].any()
    key = source_key("typed-cora")
    assert len(key) == 12 and key not in (source_key("cora"), "missing")
