"""Oracles: with full fan-out, GNNs on sampled blocks equal the full-graph GNN; layer-at-a-time inference too."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.nn import GATConv, GraphConv, SAGEConv

from graphdist.data.graph import Graph
from graphdist.testing import random_graph
from sampling import Block, ClusterSampler, NeighborSampler, as_layerwise, full_neighbor_inference

ATOL = 1e-5


@pytest.fixture(scope="module")
def graph() -> Graph:
    g = random_graph(250, avg_degree=5.0, seed=11)
    g.x = torch.randn(g.num_nodes, 6, generator=torch.Generator().manual_seed(0))
    return g


class MeanSAGE(nn.Module):
    """A 2-layer GraphSAGE (mean aggregation) written against blocks: a LayerwiseModel."""

    num_layers = 2

    def __init__(self, dims=(6, 16, 3)) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.self_lin = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.nbr_lin = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:]))

    def layer_forward(self, i: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        mean = (block.adj() @ x) / block.in_degrees().clamp(min=1).unsqueeze(1)
        h = self.self_lin[i](x[: block.num_dst]) + self.nbr_lin[i](mean)
        return torch.relu(h) if i < self.num_layers - 1 else h

    def forward(self, x: torch.Tensor, blocks: list[Block]) -> torch.Tensor:
        for i, block in enumerate(blocks):
            x = self.layer_forward(i, x, block)
        return x

    def full(self, x: torch.Tensor, g: Graph) -> torch.Tensor:
        """The same model on the whole graph, without blocks (scatter mean over edge_index)."""
        src, dst = g.edge_index()
        deg = torch.bincount(dst, minlength=g.num_nodes).clamp(min=1).unsqueeze(1)
        for i in range(self.num_layers):
            mean = torch.zeros(g.num_nodes, x.shape[1]).index_add_(0, dst, x[src]) / deg
            x = self.self_lin[i](x) + self.nbr_lin[i](mean)
            x = torch.relu(x) if i < self.num_layers - 1 else x
        return x


def _pyg_full(convs, x, edge_index):
    for i, conv in enumerate(convs):
        x = conv(x, edge_index)
        x = torch.relu(x) if i < len(convs) - 1 else x
    return x


def _pyg_blocks(convs, x, blocks):
    for i, (conv, b) in enumerate(zip(convs, blocks)):
        x = conv(b.pair(x), b.edge_index, size=b.size)
        x = torch.relu(x) if i < len(convs) - 1 else x
    return x


SEEDS = torch.tensor([0, 7, 3, 199, 120, 64, 249])


def test_mean_sage_on_full_fanout_blocks_equals_full_graph(graph):
    model = MeanSAGE()
    batch = NeighborSampler(graph, [-1, -1], seed=0).sample(SEEDS)
    with torch.no_grad():
        got = model(graph.x[batch.input_nodes], batch.blocks)
        want = model.full(graph.x, graph)[SEEDS]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: [SAGEConv(6, 16), SAGEConv(16, 3)],
        lambda: [GraphConv(6, 16), GraphConv(16, 3)],
        lambda: [GATConv((6, 6), 8, heads=2, add_self_loops=False), GATConv((16, 16), 3, add_self_loops=False)],
    ],
    ids=["SAGEConv", "GraphConv", "GATConv"],
)
def test_pyg_layers_on_full_fanout_blocks_equal_full_graph(graph, make):
    torch.manual_seed(0)
    convs = make()
    batch = NeighborSampler(graph, [-1, -1], seed=0).sample(SEEDS)
    with torch.no_grad():
        got = _pyg_blocks(convs, graph.x[batch.input_nodes], batch.blocks)
        want = _pyg_full(convs, graph.x, graph.edge_index())[SEEDS]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


def test_partial_fanout_differs_from_full_graph(graph):
    """The oracle can fail: with a fan-out of 1 the output is not the full-graph one."""
    model = MeanSAGE()
    batch = NeighborSampler(graph, [1, 1], seed=0).sample(SEEDS)
    with torch.no_grad():
        got = model(graph.x[batch.input_nodes], batch.blocks)
        want = model.full(graph.x, graph)[SEEDS]
    assert not torch.allclose(got, want, atol=1e-3)


def test_full_neighbor_inference_equals_full_graph(graph):
    model = MeanSAGE()
    with torch.no_grad():
        want = model.full(graph.x, graph)
    got = full_neighbor_inference(model, graph, graph.x, batch_size=37)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


def test_full_neighbor_inference_with_pyg_convs(graph):
    torch.manual_seed(0)
    model = as_layerwise([SAGEConv(6, 16), SAGEConv(16, 3)])
    model.train()
    with torch.no_grad():
        want = _pyg_full(model.convs, graph.x, graph.edge_index())
    got = full_neighbor_inference(model, graph, graph.x, batch_size=64)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)
    assert model.training, "the model's mode is restored"


def test_full_neighbor_inference_rejects_plain_modules(graph):
    with pytest.raises(ValueError, match="LayerwiseModel"):
        full_neighbor_inference(nn.Linear(6, 2), graph, graph.x)


def test_cluster_batch_of_all_clusters_equals_full_graph(graph):
    """The induced subgraph of every cluster is the whole graph: ClusterGCN's blocks run the same models."""
    clusters = torch.arange(graph.num_nodes) % 4
    batch = ClusterSampler(graph, clusters, num_layers=2).sample(torch.arange(4))
    model = MeanSAGE()
    with torch.no_grad():
        got = model(graph.x[batch.input_nodes], batch.blocks)
        want = model.full(graph.x, graph)[batch.seed_nodes]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)
