"""Reference models on full-neighbour blocks equal the full-graph computation (PyG oracles)."""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from torch import nn

from graphdist.models import (
    GAT,
    GCN,
    GraphSAGE,
    as_block_model,
    build_model,
    check_picklable,
    gcn_norm_block,
    relu_dropout_,
    supports_layerwise,
)

try:  # the real Block when the sampling package is there; the same fields otherwise
    from sampling.base import Block
except ImportError:  # pragma: no cover - depends on the other engineer's checkout

    @dataclass
    class Block:  # type: ignore[no-redef]
        src: torch.Tensor
        dst: torch.Tensor
        num_src: int
        num_dst: int
        indptr: torch.Tensor
        edge_weight: Optional[torch.Tensor] = None

        @property
        def edge_index(self) -> torch.Tensor:
            return torch.stack([self.src, self.dst])

        @property
        def size(self) -> tuple[int, int]:
            return (self.num_src, self.num_dst)


def _graph(n: int = 40, pairs: int = 80, seed: int = 0) -> torch.Tensor:
    """Undirected edge_index without self loops or duplicates."""
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randint(0, n, (2, pairs), generator=gen)
    keep = a != b
    e = torch.stack([torch.cat([a[keep], b[keep]]), torch.cat([b[keep], a[keep]])])
    return torch.unique(e, dim=1)


def _full_blocks(edge_index: torch.Tensor, n: int, seeds: torch.Tensor, num_layers: int):
    """Message-flow blocks with every in-neighbour, built from the seeds outward."""
    src_all, dst_all = edge_index
    blocks, dst_nodes = [], seeds
    for _ in range(num_layers):
        local = {int(v): i for i, v in enumerate(dst_nodes.tolist())}
        order = list(dst_nodes.tolist())
        srcs, dsts, indptr = [], [], [0]
        for j, v in enumerate(dst_nodes.tolist()):
            for u in sorted(src_all[dst_all == v].tolist()):
                if u not in local:
                    local[u] = len(order)
                    order.append(u)
                srcs.append(local[u])
                dsts.append(j)
            indptr.append(len(srcs))
        blocks.append(Block(src=torch.tensor(srcs, dtype=torch.int64), dst=torch.tensor(dsts, dtype=torch.int64),
                            num_src=len(order), num_dst=int(dst_nodes.numel()),
                            indptr=torch.tensor(indptr, dtype=torch.int64)))
        dst_nodes = torch.tensor(order, dtype=torch.int64)
    return dst_nodes, blocks[::-1]


@pytest.fixture(scope="module")
def graph():
    torch.manual_seed(0)
    n = 40
    edge_index = _graph(n)
    x = torch.randn(n, 6)
    seeds = torch.tensor([3, 17, 0, 25, 8])
    return n, edge_index, x, seeds


def test_graphsage_equals_pyg_sageconv_full_graph(graph):
    from torch_geometric.nn import SAGEConv

    n, edge_index, x, seeds = graph
    model = GraphSAGE(6, 16, 4, num_layers=3, dropout=0.5).eval()
    convs = [SAGEConv(layer.in_dim, layer.out_dim, aggr="mean") for layer in model.layers]
    for layer, conv in zip(model.layers, convs):
        with torch.no_grad():
            conv.lin_r.weight.copy_(layer.weight[:, : layer.in_dim])
            conv.lin_l.weight.copy_(layer.weight[:, layer.in_dim :])
            conv.lin_l.bias.copy_(layer.bias)
    h = x
    for i, conv in enumerate(convs):
        h = conv(h, edge_index)
        h = h.relu() if i < 2 else h
    input_nodes, blocks = _full_blocks(edge_index, n, seeds, 3)
    out = model(x[input_nodes], blocks)
    torch.testing.assert_close(out, h[seeds], rtol=1e-5, atol=1e-5)
    # layer-wise chain == forward
    z = x[input_nodes]
    for i, b in enumerate(blocks):
        z = model.layer_forward(i, z, b)
    torch.testing.assert_close(z, out)


def _naive_sage(model: GraphSAGE, x: torch.Tensor, blocks) -> torch.Tensor:
    """GraphSAGE with plain autograd ops (index_add), dropout off: the gradient oracle."""
    for i, (layer, b) in enumerate(zip(model.layers, blocks)):
        deg = (b.indptr[1:] - b.indptr[:-1]).clamp_min(1).float().unsqueeze(1)
        agg = torch.zeros(b.num_dst, x.shape[1]).index_add(0, b.dst, x[b.src]) / deg
        x = torch.cat([x[: b.num_dst], agg], 1) @ layer.weight.t() + layer.bias
        x = x.relu() if i < len(blocks) - 1 else x
    return x


def test_graphsage_gradients_match_plain_autograd(graph):
    n, edge_index, x, seeds = graph
    model = GraphSAGE(6, 8, 3, num_layers=2, dropout=0.0)
    input_nodes, blocks = _full_blocks(edge_index, n, seeds, 2)
    xin = x[input_nodes].clone().requires_grad_(True)
    model(xin, blocks).square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [xin.grad.clone()]
    model.zero_grad()
    xin2 = x[input_nodes].clone().requires_grad_(True)
    _naive_sage(model, xin2, blocks).square().sum().backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()] + [xin2.grad]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_gcn_with_global_degree_weights_equals_gcnconv(graph):
    from torch_geometric.nn import GCNConv

    n, edge_index, x, seeds = graph
    model = GCN(6, 16, 4, num_layers=2, dropout=0.5).eval()
    convs = [GCNConv(layer.in_dim, layer.out_dim) for layer in model.layers]
    for layer, conv in zip(model.layers, convs):
        with torch.no_grad():
            conv.lin.weight.copy_(layer.weight)
            conv.bias.copy_(torch.randn_like(conv.bias))
            layer.bias.copy_(conv.bias)
    h = convs[1](convs[0](x, edge_index).relu(), edge_index)
    deg = torch.bincount(edge_index[1], minlength=n)
    input_nodes, blocks = _full_blocks(edge_index, n, seeds, 2)
    # global ids of each block's sources: layer i's sources are the input nodes' prefix
    normed = [gcn_norm_block(b, deg[input_nodes[: b.num_src]]) for b in blocks]
    assert all(b.edge_weight is not None and b.src.numel() == o.src.numel() + o.num_dst for b, o in zip(normed, blocks))
    out = model(x[input_nodes], normed)
    torch.testing.assert_close(out, h[seeds], rtol=1e-5, atol=1e-5)
    z = x[input_nodes]
    for i, b in enumerate(normed):
        z = model.layer_forward(i, z, b)
    torch.testing.assert_close(z, out)


def test_sampled_gcn_aggregation_is_unbiased_by_exact_enumeration():
    """Over every k-subset of each row's neighbours (what a fan-out k draws, each equally likely),
    the mean sampled aggregation equals the full one; without the d/k rescale it is k/d of it."""
    import itertools

    from graphdist.models.ops import aggregate

    torch.manual_seed(1)
    neighbours = [[1, 2, 3, 4], [0, 2, 4]]  # dst 0 and 1 (sources 0..4; dst i is source i)
    deg = torch.tensor([4, 3, 6, 2, 5])  # global degrees; sources 2-4 have neighbours outside this block
    x = torch.randn(5, 3)

    def agg(rows):
        src = torch.tensor([u for r in rows for u in r])
        dst = torch.tensor([v for v, r in enumerate(rows) for _ in r])
        indptr = torch.tensor([0] + list(itertools.accumulate(len(r) for r in rows)))
        block = gcn_norm_block(Block(src=src, dst=dst, num_src=5, num_dst=2, indptr=indptr), deg)
        return aggregate(x, block, "weighted")

    full = agg(neighbours)
    for k in (1, 2, 3):
        subsets = list(itertools.product(*(itertools.combinations(r, min(k, len(r))) for r in neighbours)))
        mean = torch.stack([agg([list(c) for c in choice]) for choice in subsets]).mean(0)
        torch.testing.assert_close(mean, full, rtol=1e-5, atol=1e-6)
    # the rescale is what makes it so: one sampled neighbour out of d carries d times its weight
    one = agg([[1], [0]])
    inv = (deg.float() + 1).rsqrt()
    torch.testing.assert_close(one[0], x[0] / 5 + 4 * inv[0] * inv[1] * x[1])


def test_gcn_on_a_graph_with_self_loops_equals_gcnconv():
    """An existing self loop counts once (PyG adds remaining self loops only), in the degree too."""
    from torch_geometric.nn import GCNConv

    from graphdist.data.graph import Graph

    torch.manual_seed(2)
    n = 12
    edge_index = _graph(n)
    loops = torch.tensor([[0, 3, 7], [0, 3, 7]])  # nodes 0, 3 and 7 have a self loop of their own
    edge_index = torch.cat([edge_index, loops], dim=1)
    x = torch.randn(n, 6)
    model = GCN(6, 4, 3, num_layers=1, dropout=0.0).eval()
    conv = GCNConv(6, 3)
    with torch.no_grad():
        conv.lin.weight.copy_(model.layers[0].weight)
        conv.bias.copy_(model.layers[0].bias)
    seeds = torch.arange(n)
    input_nodes, blocks = _full_blocks(edge_index, n, seeds, 1)
    order = edge_index[1].argsort(stable=True)
    g = Graph(indptr=torch.cat([torch.zeros(1, dtype=torch.int64), torch.bincount(edge_index[1], minlength=n).cumsum(0)]),
              indices=edge_index[0][order])
    deg = g.degrees(self_loops=False)
    assert (g.degrees() - deg).tolist() == [1 if v in (0, 3, 7) else 0 for v in range(n)]
    out = model(x[input_nodes], [gcn_norm_block(blocks[0], deg[input_nodes])])
    torch.testing.assert_close(out, conv(x, edge_index)[seeds], rtol=1e-5, atol=1e-5)


def test_gcn_without_edge_weight_normalises_by_block_degree():
    b = Block(src=torch.tensor([1, 2, 0]), dst=torch.tensor([0, 0, 1]), num_src=3, num_dst=2,
              indptr=torch.tensor([0, 2, 3]))
    model = GCN(2, 2, 2, num_layers=1, dropout=0.0)
    x = torch.tensor([[1.0, 0.0], [2.0, 1.0], [4.0, 2.0]])
    agg = torch.stack([(x[0] + x[1] + x[2]) / 3, (x[1] + x[0]) / 2])
    want = agg @ model.layers[0].weight.t() + model.layers[0].bias
    torch.testing.assert_close(model(x, [b]), want)


def test_gat_on_blocks_equals_full_graph(graph):
    n, edge_index, x, seeds = graph
    model = GAT(6, 4, 3, num_layers=2, dropout=0.5, heads=2).eval()
    h = model.convs[0](x, edge_index)
    h = model.convs[1](torch.nn.functional.elu(h), edge_index)
    input_nodes, blocks = _full_blocks(edge_index, n, seeds, 2)
    torch.testing.assert_close(model(x[input_nodes], blocks), h[seeds], rtol=1e-5, atol=1e-5)


def test_as_block_model_runs_a_pyg_layer_loop(graph):
    from torch_geometric.nn import SAGEConv

    n, edge_index, x, seeds = graph
    convs = [SAGEConv(6, 8), SAGEConv(8, 3)]
    model = as_block_model(convs).eval()
    assert supports_layerwise(model)
    want = convs[1](convs[0](x, edge_index).relu(), edge_index)[seeds]
    input_nodes, blocks = _full_blocks(edge_index, n, seeds, 2)
    torch.testing.assert_close(model(x[input_nodes], blocks), want, rtol=1e-5, atol=1e-5)
    sage = GraphSAGE(6, 8, 3, 2)
    assert as_block_model(sage) is sage
    with pytest.raises(TypeError, match="forward\\(x, blocks\\)"):
        as_block_model(nn.ReLU())


def test_empty_batch_runs_forward_and_backward():
    empty = Block(src=torch.zeros(0, dtype=torch.int64), dst=torch.zeros(0, dtype=torch.int64), num_src=0,
                  num_dst=0, indptr=torch.zeros(1, dtype=torch.int64))
    for name in ("sage", "gcn"):
        model = build_model(name, 4, 8, 3, num_layers=2, dropout=0.5)
        out = model(torch.zeros(0, 4), [empty, empty])
        assert out.shape == (0, 3)
        (out.sum() * 0.0).backward()
        assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


@pytest.mark.parametrize("p", [0.3, 0.5, 0.25])  # a comparison of random floats; the {0, 2} mask; 2 bits
def test_relu_dropout_keeps_about_one_minus_p_and_gradient_follows_the_mask(p):
    torch.manual_seed(0)
    h = torch.randn(200, 500).abs().add_(0.1).requires_grad_(True)
    out = relu_dropout_(h * 1.0, p, True)
    kept = (out > 0).float().mean().item()
    assert abs(kept - (1 - p)) < 0.01, kept
    torch.testing.assert_close(out[out > 0], (h * 1.0)[out > 0].detach() / (1 - p), rtol=1e-3, atol=1e-6)
    out.sum().backward()
    torch.testing.assert_close(h.grad, (out > 0).float() / (1 - p), rtol=1e-3, atol=1e-6)
    negative = relu_dropout_(-h.detach() * 1.0, p, True)  # ReLU first: nothing negative survives
    assert not negative.any()
    eval_out = relu_dropout_(torch.tensor([-1.0, 2.0]), 0.3, False)
    assert eval_out.tolist() == [0.0, 2.0]


class _LocalNet(nn.Module):
    def forward(self, x, blocks):
        return x


def test_check_picklable_catches_main_classes_and_functions(monkeypatch):
    check_picklable(build_model("gat", 4, 4, 2, num_layers=2, heads=2))
    check_picklable(_LocalNet())
    # A class "defined in a script": its module is __main__ and __main__ names it.
    main_cls = type("ScriptNet", (nn.Module,), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "ScriptNet", main_cls, raising=False)
    with pytest.raises(ValueError, match=r"ScriptNet.*importable module \(not __main__ / a notebook cell\)"):
        check_picklable(main_cls())
    pickle.dumps(main_cls())  # plain pickle is fooled: only a spawned worker would fail

    def factory():
        return GraphSAGE(4, 4, 2)

    factory.__module__ = "__main__"
    factory.__qualname__ = "factory"
    monkeypatch.setattr(sys.modules["__main__"], "factory", factory, raising=False)
    with pytest.raises(ValueError, match="factory function in a module"):
        check_picklable(factory)
    # A notebook class that __main__ no longer names still gets the __main__ message.
    lost = type("LostNet", (nn.Module,), {"__module__": "__main__"})
    with pytest.raises(ValueError, match="LostNet is defined in __main__"):
        check_picklable(lost())


def test_build_model_rejects_unknown_names():
    with pytest.raises(ValueError, match="Expected model name one of .*got 'mlp'"):
        build_model("mlp", 4, 4, 2)
    with pytest.raises(ValueError, match="one block per layer"):
        GraphSAGE(4, 4, 2, num_layers=2)(torch.zeros(1, 4), [])


def test_checkpoints_from_before_the_linear_submodules_still_load():
    from graphdist.models.gcn import GCN
    from graphdist.models.sage import GraphSAGE

    for model in (GraphSAGE(6, 8, 3, num_layers=2), GCN(6, 8, 3, num_layers=2)):
        old = {k.replace("lin.", ""): v + 1.0 for k, v in model.state_dict().items()}  # the keys as they were
        assert not any(".lin." in k for k in old)
        model.load_state_dict(old)
        for key, value in model.state_dict().items():
            assert torch.equal(value, old[key.replace("lin.", "")]), key


@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize("in_dim,out_dim", [(8, 3), (3, 8)])  # narrowing: transform first; widening: aggregate first
def test_sage_layer_inference_order_equals_training_order(aggr, in_dim, out_dim):
    from graphdist.models.sage import SAGELayer
    from graphdist.testing import tiny_graph
    from sampling import NeighborSampler

    g = tiny_graph(feature_dim=in_dim)
    block = NeighborSampler(g, [-1], seed=0).sample(torch.arange(5)).blocks[0]
    layer = SAGELayer(in_dim, out_dim, aggr)
    x = torch.randn(block.num_src, in_dim)
    with torch.enable_grad():
        trained_order = layer(x, block)
    with torch.no_grad():
        inference_order = layer(x, block)
    torch.testing.assert_close(inference_order, trained_order.detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize("in_dim,out_dim", [(8, 3), (3, 8)])
def test_sage_layer_with_halo_fetched_while_it_works_equals_the_whole_block(aggr, in_dim, out_dim):
    """Inner rows first, halo rows arriving later: the inner columns are aggregated before the halo is
    awaited, and the result equals the layer on the concatenated rows."""
    from types import SimpleNamespace

    from graphdist.models.sage import SAGELayer
    from graphdist.testing import tiny_graph
    from sampling import NeighborSampler

    g = tiny_graph(feature_dim=in_dim)
    block = NeighborSampler(g, [-1], seed=0).sample(torch.arange(5)).blocks[0]
    num_inner = 7  # sources 0..6 are "inner" (the 5 destinations first), the rest "halo"
    layer = SAGELayer(in_dim, out_dim, aggr)
    x = torch.randn(block.num_src, in_dim)
    order = []

    def fetch_halo(rows):
        order.append("fetch")
        full = x if rows.shape[1] == in_dim else x @ layer.weight[:, in_dim:].t()

        def wait():
            order.append("wait")
            return full[num_inner:]
        return SimpleNamespace(wait=wait)

    with torch.no_grad():
        split = layer.forward_with_halo(x[:num_inner], block, fetch_halo)
        whole = layer(x, block)
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-5)
    assert order == ["fetch", "wait"]


def test_gcn_norm_compiled_loop_matches_torch(monkeypatch):
    """The compiled normalisation gives the torch code's blocks bit for bit: sampled self loops dropped,
    rows without neighbours, integer and float degrees."""
    from graphdist import _numba
    from graphdist.models import gcn as gcn_module
    from graphdist.testing.env import require
    from sampling import NeighborSampler
    from graphdist.testing import random_graph

    require(_numba.numba_module() is not None, "numba is not installed: the compiled GCN normalisation cannot run")
    monkeypatch.setattr(gcn_module, "COMPILED_MIN_EDGES", 0)
    monkeypatch.setattr(_numba, "WARMUP_CALLS", 0)
    g = random_graph(300, avg_degree=6.0, seed=2)
    loops = torch.arange(0, 300, 3)  # a third of the nodes have a self loop the sampler can draw
    g = type(g).from_edge_index(torch.cat([g.edge_index(), torch.stack([loops, loops])], 1), num_nodes=300)
    batch = NeighborSampler(g, [8, 4], seed=0).sample(torch.arange(0, 300, 7))
    degree = g.degrees()[batch.input_nodes]
    for block in batch.blocks:
        for src_degree in (degree[: block.num_src], degree[: block.num_src].to(torch.float32) + 0.5):
            monkeypatch.setenv("GRAPHDIST_NUMBA", "0")
            ref = gcn_norm_block(block, src_degree)
            monkeypatch.setenv("GRAPHDIST_NUMBA", "1")
            got = gcn_norm_block(block, src_degree)
            for name in ("src", "dst", "indptr", "edge_weight"):
                assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert bool((batch.blocks[0].src == batch.blocks[0].dst).any())  # the loops were drawn
