"""The heterogeneous generator (graphdist/data/synthetic_hetero.py): determinism, types and relations,
degree laws, labels on the target type only, the dataset name and the out-of-core directory."""

from __future__ import annotations

import pytest
import torch

from graphdist.data import Graph, load_graph
from graphdist.data.hetero import check_typed
from graphdist.data.loaders import source_key
from graphdist.data.readers.registry import claim
from graphdist.data.synthetic import parse_synthetic_name
from graphdist.data.synthetic_disk import load_generated
from graphdist.data.synthetic_hetero import (GENERATOR_VERSION, NUM_CLASSES, PARAMS, parse_hetero_name,
                                             synthetic_hetero, synthetic_hetero_to_disk)

N = 6_000  # a few ms to generate; enough papers for the degree laws to show
FIELDS = ("indptr", "indices", "edge_type", "x", "y", "train_mask", "val_mask", "test_mask")


@pytest.fixture(scope="module")
def graph() -> Graph:
    return synthetic_hetero(N, seed=0)


def type_slice(g: Graph, t: str) -> slice:
    i = g.schema.type_id(t)
    return slice(g.schema.offsets[i], g.schema.offsets[i + 1])


def relation_edges(g: Graph, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) ids within their types of relation ``key``."""
    s = g.schema
    r = s.relations[s.relation_id(key)]
    pick = g.edge_type.long() == s.relation_id(key)
    return (g.indices.long()[pick] - s.offsets[s.type_id(r.src)],
            g.dst_of_edges()[pick] - s.offsets[s.type_id(r.dst)])


def per_paper(g: Graph, key: str, end: int) -> torch.Tensor:
    """How many edges of ``key`` each paper has at its end ``end`` (0: source, 1: destination)."""
    return torch.bincount(relation_edges(g, key)[end], minlength=g.schema.num_nodes("paper"))


# ------------------------------------------------------------------ determinism
def test_same_size_and_seed_give_bit_identical_arrays(graph):
    again = synthetic_hetero(N, seed=0)
    for field in FIELDS:
        assert torch.equal(getattr(graph, field), getattr(again, field)), field
    assert again.schema == graph.schema


def test_another_seed_or_size_gives_another_graph(graph):
    other = synthetic_hetero(N, seed=1)
    assert not torch.equal(graph.y, other.y) and not torch.equal(graph.x, other.x)
    smaller = synthetic_hetero(N - 1, seed=0)  # seeded from (seed, N): not a prefix of the same draws
    papers = min(graph.schema.num_nodes("paper"), smaller.schema.num_nodes("paper"))
    assert not torch.equal(graph.y[:papers], smaller.y[:papers])


# ------------------------------------------------------------------ types and relations
def test_node_types_widths_and_a_featureless_type(graph):
    s = graph.schema
    check_typed(graph)
    assert s.node_types == ("paper", "author", "venue", "term") and s.target == "paper"
    assert s.widths == (PARAMS.width_paper, PARAMS.width_author, PARAMS.width_venue, 0)
    assert len(set(s.widths)) == 4 and graph.x.shape == (N, max(s.widths))
    assert s.featureless == ("term",) and s.num_nodes("term") / N >= 0.2
    assert all(s.num_nodes(t) >= NUM_CLASSES for t in s.node_types)
    for t, width in zip(s.node_types, s.widths):
        rows = graph.x[type_slice(graph, t)]
        assert bool((rows[:, width:] == 0).all()), t  # padding and featureless rows are zeros
        if width:
            assert float(rows[:, :width].std()) > 0.5, t


def test_every_relation_comes_with_its_reverse_and_every_type_receives_messages(graph):
    s = graph.schema
    assert s.num_relations == 8
    for r in s.relations:
        src, dst = relation_edges(graph, r.key)
        assert src.numel() > 0, r.key
        reverse = [q for q in s.relations if (q.src, q.dst) == (r.dst, r.src) and q.name != r.name]
        assert len(reverse) == 1, r.key
        back_src, back_dst = relation_edges(graph, reverse[0].key)
        width = max(s.num_nodes(r.src), s.num_nodes(r.dst))
        assert torch.equal(torch.sort(src * width + dst).values, torch.sort(back_dst * width + back_src).values), r.key
    assert {r.dst for r in s.relations} == set(s.node_types)


def test_no_repeated_pairs_and_no_self_citations(graph):
    for r in graph.schema.relations:
        src, dst = relation_edges(graph, r.key)
        keys = src * graph.num_nodes + dst
        assert torch.unique(keys).numel() == keys.numel(), r.key
    citing, cited = relation_edges(graph, "cites")
    assert not bool((citing == cited).any())


# ------------------------------------------------------------------ degree laws
def test_each_relation_has_its_own_degree_law(graph):
    venues = per_paper(graph, "published_in", 0)
    assert bool((venues == 1).all())  # exactly one venue per paper
    authors = per_paper(graph, "written_by", 0).float()
    assert float(authors.min()) >= 1
    extra = authors - 1  # Poisson: variance about the mean (a few repeated draws are dropped)
    assert 0.7 < float(extra.var() / extra.mean()) < 1.3
    terms = per_paper(graph, "has_term", 0).float()  # min_terms + Binomial; a popular term drawn twice counts once
    assert int(terms.min()) >= 1 and int(terms.max()) <= PARAMS.min_terms + PARAMS.extra_terms
    assert abs(float(terms.mean()) - (PARAMS.min_terms + PARAMS.extra_terms / 2)) < 0.3
    cited = per_paper(graph, "cites", 1).float()  # in-degree: heavy tail against a Poisson author load
    papers_per_author = torch.bincount(relation_edges(graph, "writes")[0]).float()
    assert float(cited.max() / cited.mean()) > 10
    assert float(cited.max() / cited.mean()) > 3 * float(papers_per_author.max() / papers_per_author.mean())
    papers_per_term = torch.bincount(relation_edges(graph, "describes")[0]).float()
    assert float(papers_per_term.max() / papers_per_term.mean()) > 10


# ------------------------------------------------------------------ labels
def test_labels_and_masks_only_on_the_target_type(graph):
    papers = type_slice(graph, "paper")
    labelled = graph.y >= 0
    assert bool(labelled[papers].all()) and int(labelled.sum()) == graph.schema.num_nodes("paper")
    assert graph.num_classes == NUM_CLASSES
    counts = torch.bincount(graph.y[papers], minlength=NUM_CLASSES)
    assert int(counts.max() - counts.min()) <= 1  # balanced classes
    masks = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask]).int()
    assert bool((masks.sum(0)[papers] == 1).all()) and int(masks.sum()) == graph.schema.num_nodes("paper")
    assert abs(float(graph.train_mask.sum()) / graph.schema.num_nodes("paper") - PARAMS.train_frac) < 1e-3


def test_relations_carry_the_label_with_their_own_homophily(graph):
    """Citations join same-label papers at ``h + (1 - h) / 8``: the label lives in the neighbourhood."""
    citing, cited = relation_edges(graph, "cites")
    y = graph.y[type_slice(graph, "paper")]
    same = float((y[citing] == y[cited]).float().mean())
    expected = PARAMS.homophily_cites + (1 - PARAMS.homophily_cites) / NUM_CLASSES
    assert abs(same - expected) < 0.05


# ------------------------------------------------------------------ names, readers, out of core
def test_the_name_is_claimed_by_its_own_reader_and_loads_the_typed_graph():
    assert parse_hetero_name("synthetic-hetero-100k") == 100_000 and parse_hetero_name("synthetic-100k") is None
    assert parse_synthetic_name("synthetic-hetero-100k") is None
    reader, target = claim("synthetic-hetero-100k")
    assert reader.name == "synthetic hetero" and reader.key(target) == f"gen-v{GENERATOR_VERSION}"
    assert claim("synthetic-2k")[0].name == "synthetic"
    assert source_key("synthetic-hetero-2500") == f"gen-v{GENERATOR_VERSION}"
    g = load_graph("synthetic-hetero-2500")
    assert g.typed and g.name == "synthetic-hetero-2500" and g.num_nodes == 2_500
    assert torch.equal(g.indices, synthetic_hetero(2_500).indices)


def test_out_of_core_directory_maps_the_same_typed_graph_back(tmp_path):
    out = tmp_path / "h"
    g = synthetic_hetero_to_disk(800, out, seed=2)
    ref = synthetic_hetero(800, seed=2)
    assert g.schema == ref.schema and g.indices.dtype == torch.int32
    for field in FIELDS:
        assert torch.equal(getattr(g, field).to(getattr(ref, field).dtype), getattr(ref, field)), field
    stamp = (out / "x.npy").stat().st_mtime_ns
    synthetic_hetero_to_disk(800, out, seed=2)  # the same arguments: reused, not rewritten
    assert (out / "x.npy").stat().st_mtime_ns == stamp
    assert load_generated(out).typed and load_graph(out).schema == ref.schema


def test_out_of_core_generation_never_builds_the_edges_in_memory_and_equals_it_across_buckets(tmp_path, monkeypatch):
    import graphdist.data.synthetic_disk as disk
    import graphdist.data.synthetic_hetero as gen

    ref = synthetic_hetero(3_000, seed=4)
    # many buckets and feature chunks on a small graph: every seam of the out-of-core path is crossed
    monkeypatch.setattr(disk, "_BUCKET_KEYS", 2_000)
    monkeypatch.setattr(gen, "_CHUNK_ROWS", 97)
    monkeypatch.setattr(gen, "typed_graph", lambda *a, **k: pytest.fail("the in-memory builder ran"))
    g = synthetic_hetero_to_disk(3_000, tmp_path / "h", seed=4)
    assert g.schema == ref.schema and g.schema.relations == ref.schema.relations
    for field in FIELDS:
        assert torch.equal(getattr(g, field).to(getattr(ref, field).dtype), getattr(ref, field)), field
    assert not list((tmp_path / "h").glob("*.raw")) and not (tmp_path / "h" / "buckets").exists()


def test_too_small_a_graph_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"num_nodes: expected an integer in \[100, 2\*\*31\)"):
        synthetic_hetero(50)
