"""The readers load_graph chooses among (graphdist/data/readers/registry.py): claimed by name or content,
keyed for caches by the reader that claimed the source, open to a user's format."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from graphdist.data import load_graph, synthetic
from graphdist.data.loaders import source_key
from graphdist.data.readers import registry
from graphdist.data.readers.registry import Reader, claim, register_reader


def test_each_source_is_claimed_by_one_reader_in_order(tmp_path):
    np.savez(tmp_path / "g.npz", edge_index=np.array([[0, 1, 1], [1, 0, 2]]), x=np.eye(3, dtype=np.float32))
    (tmp_path / "e.csv").write_text("0,1\n1,2\n")
    assert claim("synthetic-2k")[0].name == "synthetic"
    reader, target = claim(str(tmp_path / "g.npz"))
    assert reader.name == "npz" and reader.read(target).num_nodes == 3
    assert claim(str(tmp_path / "e.csv"))[0].name == "edge list"
    assert claim(str(tmp_path / "nothing.xyz")) == (None, None)
    # A name is a name only when given as one: a path object never is.
    assert claim("synthetic-2k", is_name=False) == (None, None)


def test_the_cache_key_comes_from_the_claiming_reader(tmp_path):
    assert source_key("synthetic-2k") == "gen"
    assert source_key(str(tmp_path / "absent.npz")) == "missing"
    path = tmp_path / "e.csv"
    path.write_text("0,1\n1,2\n")
    first = source_key(str(path))
    assert len(first) == 12 and first not in ("gen", "missing")
    path.write_text("0,1\n1,2\n2,3\n")  # another graph under the same name: another key
    assert source_key(str(path)) != first


def test_a_registered_reader_claims_first_reads_and_keys_its_format(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "READERS", list(registry.READERS))  # the built-in list as it was, after
    path = tmp_path / "ring.ring"
    path.write_text("6")
    register_reader(Reader("ring", lambda text, is_name: text if text.endswith(".ring") else None,
                           lambda target, **args: synthetic(int(open(target).read()) * 10, seed=1),
                           key=lambda target: "ring-" + open(target).read()))
    assert load_graph(str(path)).num_nodes == 60
    assert source_key(str(path)) == "ring-6"


def test_an_argument_a_reader_does_not_read_is_said_to_be_ignored(tmp_path):
    synthetic(30, seed=0, out=tmp_path / "gen")  # a generated graph directory
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_graph(tmp_path / "gen", split="time").num_nodes == 30
    assert any("split ignored" in str(w.message) and "directory" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="heterogeneous OGB"):
        (tmp_path / "mag" / "raw" / "relations").mkdir(parents=True)
        load_graph(tmp_path / "mag")
