"""Oracles: with every neighbour sampled, R-GCN and relation-wise SAGE on blocks equal PyG's RGCNConv and
HeteroConv on the whole typed graph, logits and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphdist.data.hetero import hetero_to_pyg
from graphdist.models.hetero import RGCN, RelationSAGE
from graphdist.testing import typed_random_graph
from sampling import NeighborSampler

ATOL = 1e-5


def _encoded(model, g):
    ids = torch.arange(g.num_nodes)
    return model.encoder(g.x, g.schema.node_type(ids), g.schema.type_index(ids))


def _rgcn_full(model: RGCN, g) -> torch.Tensor:
    h = _encoded(model, g)
    for i, conv in enumerate(model.layers):
        h = conv.to_pyg()(h, g.edge_index(), g.edge_type.to(torch.int64))
        h = torch.relu(h) if i < model.num_layers - 1 else h
    return h


def _rsage_full(model: RelationSAGE, g) -> torch.Tensor:
    h = _encoded(model, g)
    data = hetero_to_pyg(g)
    s = g.schema
    for i, conv in enumerate(model.layers):
        x_dict = {t: h[s.offsets[k]: s.offsets[k + 1]] for k, t in enumerate(s.node_types)}
        out = conv(x_dict, data.edge_index_dict)
        h = torch.cat([out[t] for t in s.node_types])
        h = torch.relu(h) if i < model.num_layers - 1 else h
    return h


@pytest.mark.parametrize("kind", ["rgcn", "rsage"])
def test_sampled_typed_models_equal_pyg_on_the_whole_graph(kind: str) -> None:
    g = typed_random_graph(60, seed=2)
    torch.manual_seed(0)
    model = (RGCN(4, 8, 3, num_layers=2, dropout=0.0, schema=g.schema, num_bases=2) if kind == "rgcn"
             else RelationSAGE(4, 8, 3, num_layers=2, dropout=0.0, schema=g.schema))
    seeds = torch.arange(0, 60, 3)  # papers only: the target type comes first
    batch = NeighborSampler(g, [-1, -1], seed=0).sample(seeds)
    logits = model(g.x[batch.input_nodes], batch.blocks)
    loss = F.cross_entropy(logits, g.y[seeds])
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    full = (_rgcn_full if kind == "rgcn" else _rsage_full)(model, g)[seeds]
    want = torch.autograd.grad(F.cross_entropy(full, g.y[seeds]), list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(logits, full, atol=ATOL, rtol=1e-4)
    for (name, _), a, b in zip(model.named_parameters(), grads, want):
        a, b = (g.to_dense() if g is not None and g.is_sparse else g for g in (a, b))  # the tables' gradients
        if b is None:
            assert a is None or not bool(a.any()), name
        else:
            torch.testing.assert_close(a, b, atol=ATOL, rtol=1e-4, msg=name)


def test_every_encoder_parameter_gets_a_gradient_even_for_absent_types() -> None:
    g = typed_random_graph(30)
    model = RGCN(4, 8, 3, num_layers=1, dropout=0.0, schema=g.schema)
    batch = NeighborSampler(g, [-1], seed=0, relation_fanouts={"written_by": [0], "in": [0], "writes": [0],
                                                               "has": [0]}).sample(torch.tensor([0]))
    assert set(batch.blocks[0].node_type.tolist()) <= {0}  # papers only
    model(g.x[batch.input_nodes], batch.blocks).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_typed_models_refuse_untyped_blocks() -> None:
    from graphdist.testing import random_graph

    g = random_graph(20, seed=0)
    model = RGCN(4, 8, 3, num_layers=1, schema=typed_random_graph(10).schema)
    batch = NeighborSampler(g, [2], seed=0).sample(torch.tensor([0]))
    with pytest.raises(ValueError, match="typed graph"):
        model(torch.zeros(batch.input_nodes.numel(), 4), batch.blocks)
