"""The Graph container: conversions, transforms and every validation error it raises."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from graphdist.data.graph import Graph, as_tensor, check_finite_features, edges_to_csr, ranges
from graphdist.testing import random_graph, tiny_graph


def edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def path_graph(**node_data) -> Graph:
    """0 -> 1 -> 2 as CSR: row 1 = [0], row 2 = [1]."""
    return Graph(indptr=torch.tensor([0, 0, 1, 2]), indices=torch.tensor([0, 1]), **node_data)


# ------------------------------------------------------------------ round trips
def test_edge_index_csr_round_trip_keeps_every_edge_and_multiplicity():
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 50, (2, 400), generator=gen)
    g = Graph.from_edge_index(ei, num_nodes=50)
    back = g.edge_index()
    # Same multiset of (src, dst) pairs, now grouped by destination with sorted sources.
    assert sorted(map(tuple, back.t().tolist())) == sorted(map(tuple, ei.t().tolist()))
    assert torch.all(back[1][1:] >= back[1][:-1])
    assert g.num_edges == 400
    again = Graph.from_edge_index(back, num_nodes=50)
    assert torch.equal(again.indptr, g.indptr) and torch.equal(again.indices, g.indices)


def test_rows_are_destinations():
    g = Graph.from_edge_index([[0, 0, 2], [1, 2, 1]], num_nodes=3)
    assert g.in_neighbors(1).tolist() == [0, 2]
    assert g.in_neighbors(0).tolist() == []
    assert g.degrees().tolist() == [0, 2, 1]


def test_from_csr_wraps_without_copy():
    indptr, indices = torch.tensor([0, 1, 1]), torch.tensor([1])
    g = Graph.from_csr(indptr, indices)
    assert g.indptr.data_ptr() == indptr.data_ptr() and g.indices.data_ptr() == indices.data_ptr()
    assert g.edge_index().tolist() == [[1], [0]]


def test_pyg_round_trip():
    g = tiny_graph(feature_dim=3)
    data = g.to_pyg()
    assert data.num_nodes == 10 and data.edge_index.shape == (2, 24)
    assert edge_set(data.edge_index) == edge_set(g.edge_index())
    back = Graph.from_pyg(data, name="back")
    assert back.name == "back"
    assert torch.equal(back.indptr, g.indptr) and torch.equal(back.indices, g.indices)
    for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(back, field), getattr(g, field)), field


def test_from_pyg_converts_double_features_and_column_labels():
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), x=torch.ones(2, 2, dtype=torch.float64),
                y=torch.tensor([[1], [0]]), num_nodes=2)
    g = Graph.from_pyg(data)
    assert g.x.dtype == torch.float32 and g.y.tolist() == [1, 0]


def test_edges_to_csr_sorts_sources_within_rows():
    indptr, indices = edges_to_csr(torch.tensor([3, 1, 2, 0]), torch.tensor([1, 1, 0, 1]), 4)
    assert indptr.tolist() == [0, 1, 4, 4, 4]
    assert indices.tolist() == [2, 0, 1, 3]


def test_ranges():
    assert ranges(torch.tensor([5, 0, 9]), torch.tensor([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert ranges(torch.tensor([1]), torch.tensor([0])).numel() == 0


# ------------------------------------------------------------------ transforms and queries
def test_subgraph_maps_ids_and_keeps_internal_edges_only():
    g = tiny_graph()
    nodes = torch.tensor([4, 5, 6, 0])  # 4-5, 5-6 and 0-4 are edges; 0-9 leaves the set
    sub, ids = g.subgraph(nodes)
    assert ids.tolist() == [4, 5, 6, 0]
    assert sub.num_nodes == 4
    global_edges = {(int(ids[s]), int(ids[d])) for s, d in edge_set(sub.edge_index())}
    expected = {(s, d) for s, d in edge_set(g.edge_index()) if s in {4, 5, 6, 0} and d in {4, 5, 6, 0}}
    assert global_edges == expected == {(4, 5), (5, 4), (5, 6), (6, 5), (0, 4), (4, 0)}
    assert sub.x[:, 0].tolist() == [4.0, 5.0, 6.0, 0.0]  # x[v] == v: features follow the ids
    assert sub.y.tolist() == [0, 1, 1, 0]
    assert sub.train_mask.tolist() == [True, False, True, True]


def test_subgraph_of_no_nodes_is_empty():
    sub, ids = tiny_graph().subgraph(torch.tensor([], dtype=torch.int64))
    assert sub.num_nodes == 0 and sub.num_edges == 0 and ids.numel() == 0


def test_to_undirected_adds_reverse_edges_and_drops_duplicates():
    g = Graph.from_edge_index([[0, 0, 1, 2, 2], [1, 1, 2, 2, 0]], num_nodes=3)  # 0->1 twice, self loop 2->2
    u = g.to_undirected()
    assert edge_set(u.edge_index()) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 2), (2, 0), (0, 2)}
    assert u.num_edges == 7
    assert u.to_undirected().num_edges == 7  # idempotent


def test_degrees_and_counts_are_directed():
    g = tiny_graph()
    assert g.num_edges == 24 and int(g.degrees().sum()) == 24
    assert g.degrees().tolist() == [3, 2, 2, 2, 3, 3, 2, 2, 2, 3]
    assert g.num_classes == 2 and g.num_features == 1
    assert g.dst_of_edges().tolist() == torch.repeat_interleave(torch.arange(10), g.degrees()).tolist()


def test_random_graph_is_symmetric():
    g = random_graph(60, seed=3)
    edges = edge_set(g.edge_index())
    assert edges == {(d, s) for s, d in edges}


def test_memory_mapped_views_map_the_right_rows(tmp_path):
    arr = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "x.npy", arr)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert as_tensor(mapped, "x").tolist() == arr.tolist()
    assert as_tensor(mapped[3:5], "x").tolist() == arr[3:5].tolist()
    assert as_tensor(mapped[:, 1], "x").tolist() == arr[:, 1].tolist()
    g = Graph(indptr=torch.zeros(3, dtype=torch.int64), indices=torch.zeros(0, dtype=torch.int64), x=mapped[8:])
    assert g.x.tolist() == arr[8:].tolist()


def test_memory_mapped_features_skip_the_scan_when_asked(tmp_path):
    x = np.ones((3, 2), dtype=np.float32)
    x[1, 1] = np.nan
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    with pytest.raises(ValueError, match=r"x: features must be finite \(got NaN or inf in row 1\)"):
        path_graph(x=mapped)
    g = path_graph(x=mapped, validate_features=False)  # the loader scanned already
    assert g.x.shape == (3, 2)


def test_check_finite_features_reports_the_first_bad_row_across_chunks():
    x = torch.zeros(70_000, 2)
    x[69_999, 0] = float("inf")
    x[66_000, 1] = float("nan")
    with pytest.raises(ValueError, match=r"row 66000\)"):
        check_finite_features(x)
    check_finite_features(torch.zeros(5, 3))
    check_finite_features(torch.zeros(5, 3, dtype=torch.int64))  # integers are always finite


def test_repr_lists_sizes():
    text = repr(tiny_graph())
    assert "num_nodes=10" in text and "num_edges=24" in text and "train=5" in text


# ------------------------------------------------------------------ validation errors
INDPTR = torch.tensor([0, 0, 1, 2])
INDICES = torch.tensor([0, 1])


Y_SHAPE = "y: expected shape [3] (classes) or [3, C >= 2] (multi-label 0/1)"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"indptr": torch.tensor([], dtype=torch.int64)}, "indptr: expected a 1-D array of num_nodes + 1 entries (got shape (0,))"),
        ({"indptr": torch.zeros(2, 2, dtype=torch.int64)}, "indptr: expected a 1-D array of num_nodes + 1 entries (got shape (2, 2))"),
        ({"indptr": INDPTR.int()}, "indptr: expected dtype int64 (got torch.int32)"),
        ({"indptr": INDPTR.float()}, "indptr: expected dtype int64 (got torch.float32)"),
        ({"indices": INDICES.view(1, 2)}, "indices: expected a 1-D array (got shape (1, 2))"),
        ({"indices": INDICES.float()}, "indices: expected dtype int64 or int32 (got torch.float32)"),
        ({"indices": INDICES.to(torch.int16)}, "indices: expected dtype int64 or int32 (got torch.int16)"),
        ({"indptr": torch.tensor([1, 1, 1, 2])}, "indptr: must start at 0 (got 1)"),
        ({"indptr": torch.tensor([0, 0, 1, 3])}, "indptr: last entry must equal len(indices) = 2 (got 3)"),
        ({"indptr": torch.tensor([0, 2, 1, 2])}, "indptr: must be non-decreasing; row 1 has a negative count (-1)"),
        ({"indices": torch.tensor([0, 3])}, "indices: node ids must lie in [0, 3) (got 3)"),
        ({"indices": torch.tensor([-1, 1])}, "indices: node ids must lie in [0, 3) (got -1)"),
        ({"x": torch.zeros(2, 4)}, "x: expected shape [3, F] (got (2, 4))"),
        ({"x": torch.zeros(3)}, "x: expected shape [3, F] (got (3,))"),
        ({"x": torch.zeros(3, 4, dtype=torch.float64)}, "x: expected dtype float32 (got torch.float64)"),
        ({"y": torch.zeros(2, dtype=torch.int64)}, f"{Y_SHAPE} (got (2,))"),
        ({"y": torch.zeros(3, 1, dtype=torch.int64)}, f"{Y_SHAPE} (got (3, 1))"),
        ({"y": torch.full((3, 2), 2, dtype=torch.uint8)}, "y: a multi-label matrix holds 0 and 1 only (got 2)"),
        ({"y": torch.zeros(3, 2)}, "y: expected a multi-label matrix of integers or bools (got dtype torch.float32)"),
        ({"y": torch.zeros(3)}, "y: expected an integer dtype (got torch.float32)"),
        ({"train_mask": torch.ones(3, dtype=torch.int64)}, "train_mask: expected dtype bool (got torch.int64)"),
        ({"val_mask": torch.ones(3, dtype=torch.uint8)}, "val_mask: expected dtype bool (got torch.uint8)"),
        ({"test_mask": torch.ones(4, dtype=torch.bool)}, "test_mask: expected shape [3] (got (4,))"),
        ({"train_mask": torch.ones(3, 1, dtype=torch.bool)}, "train_mask: expected shape [3] (got (3, 1))"),
        ({"indptr": object()}, "indptr: expected an array or tensor (got object)"),
        ({"x": np.array([[1, "a"]] * 3, dtype=object)}, "x: expected a numeric array (got dtype object)"),
    ],
)
def test_construction_errors_name_the_field_and_value(kwargs, message):
    args = {"indptr": INDPTR, "indices": INDICES, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        Graph(**args)


@pytest.mark.parametrize("bad, row", [(float("nan"), 2), (float("inf"), 0), (float("-inf"), 1)])
def test_non_finite_features_are_rejected_with_the_row(bad, row):
    x = torch.zeros(3, 4)
    x[row, 3] = bad
    with pytest.raises(ValueError, match=re.escape(f"x: features must be finite (got NaN or inf in row {row})")):
        path_graph(x=x)


def test_numpy_inputs_are_accepted_and_validated_alike():
    g = Graph(indptr=np.array([0, 0, 1, 2]), indices=np.array([0, 1], dtype=np.int32),
              x=np.zeros((3, 2), dtype=np.float32), train_mask=np.array([True, False, True]))
    assert g.indices.dtype == torch.int32 and g.train_mask.dtype == torch.bool
    with pytest.raises(ValueError, match=re.escape("train_mask: expected dtype bool (got torch.int64)")):
        Graph(indptr=np.array([0, 0, 1, 2]), indices=np.array([0, 1]), train_mask=np.array([1, 0, 1]))


@pytest.mark.parametrize(
    "edge_index, num_nodes, message",
    [
        (torch.zeros(3, 2, dtype=torch.int64), None, "edge_index: expected shape [2, E] (got (3, 2))"),
        (torch.zeros(4, dtype=torch.int64), None, "edge_index: expected shape [2, E] (got (4,))"),
        (torch.tensor([[0.0, 1.7], [1.0, 0.0]]), None, "edge_index: expected an integer dtype (got torch.float32)"),
        (torch.tensor([[0, 5], [1, 0]]), 3, "edge_index: node ids must lie in [0, 3) (got 5)"),
        (torch.tensor([[0, -2], [1, 0]]), 3, "edge_index: node ids must lie in [0, 3) (got -2)"),
        (torch.tensor([[0], [1]]), -1, "num_nodes: must be >= 0 (got -1)"),
    ],
)
def test_from_edge_index_errors(edge_index, num_nodes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Graph.from_edge_index(edge_index, num_nodes=num_nodes)


def test_from_edge_index_takes_num_nodes_from_features():
    g = Graph.from_edge_index([[0], [1]], x=torch.zeros(5, 2))
    assert g.num_nodes == 5
    with pytest.raises(ValueError, match=re.escape("x: expected shape [3, F] (got (5, 2))")):
        Graph.from_edge_index([[0], [1]], num_nodes=3, x=torch.zeros(5, 2))


def test_subgraph_errors():
    g = tiny_graph()
    with pytest.raises(ValueError, match=re.escape("nodes: ids must lie in [0, 10) (got 0..10)")):
        g.subgraph([0, 10])
    with pytest.raises(ValueError, match=re.escape("nodes: ids must be distinct (got repeated ids)")):
        g.subgraph([1, 2, 1])


def test_multilabel_y_is_a_0_1_matrix_with_its_label_count():
    y = torch.tensor([[1, 0], [1, 1], [0, 0]], dtype=torch.uint8)
    g = Graph(indptr=INDPTR, indices=INDICES, y=y)
    assert g.multilabel and g.num_classes == 2
    assert not Graph(indptr=INDPTR, indices=INDICES, y=torch.tensor([0, 2, 1])).multilabel


def test_from_pyg_keeps_a_float_multilabel_matrix_as_uint8():
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
                num_nodes=3)
    g = Graph.from_pyg(data)
    assert g.y.dtype == torch.uint8 and g.y.tolist() == [[1, 0], [0, 1], [1, 1]]
    with pytest.raises(ValueError, match="holds 0 and 1 only"):
        Graph.from_pyg(Data(edge_index=data.edge_index, y=torch.tensor([[0.5, 0.0]] * 3), num_nodes=3))
