"""What ``bench_hetero.py`` compares graphdist against: a single-process R-GCN in plain PyG, and the DGL export.

- :func:`reference_run`: ``graphdist.models.hetero.RGCN``'s ``TypedEncoder`` and PyG ``RGCNConv`` layers
  on its parameters (``RGCNLayer.to_pyg``; basis decomposition, per-relation mean, root weight) on full
  neighbourhoods: no sampling, one process, one thread, Adam. Every step computes the full-graph R-GCN
  exactly where the loss reads it: the batch's seeds, through their whole L-hop in-neighbourhood
  (:func:`receptive_field`). Computing every node of synthetic-hetero-100k at every step costs ~2 s here (RGCNConv aggregates and transforms all
  N rows once per relation), ~10x the restricted step, and gives the same numbers up to dropout's draws.
  Steps are graphdist's: the train seeds shuffled every epoch, cut into ``batch_size`` batches, at most
  ``max_steps`` of them. After each epoch every node is evaluated on the whole graph in eval mode, as
  graphdist's exact layer-wise inference does; the model kept is the best-validation epoch's (first on
  ties, as ``TrainResult.best``).
- :func:`check_partitions`: that a graphdist run trained on the graph the reference trains on.
- :func:`export_for_dgl`: the typed graph as one ``.npz`` for ``bench/peers/dgl_rgcn.py`` (CSR with rows =
  destinations, each edge's relation, the padded ``x``, node types, labels, train ids), written into
  ``$GRAPHDIST_CACHE/bench/``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def receptive_field(indptr: Tensor, indices: Tensor, edge_type: Tensor, seeds: Tensor, layers: int,
                    scratch: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor, int]]]:
    """The exact ``layers``-hop in-neighbourhood of ``seeds``: the input nodes and one edge list per layer.

    Args:
        indptr, indices, edge_type: the graph's CSR (rows = destinations) and each edge's relation.
        seeds: global ids of the output nodes.
        layers: hops.
        scratch: int64 ``[num_nodes]`` filled with -1 (a global-to-local map; left as found).

    Returns:
        ``(input_nodes, hops)``; ``hops[i] = (edge_index, relation, num_dst)`` of layer ``i`` from the input
        layer on, in local ids: a layer's destinations are the first ``num_dst`` of its sources, so
        ``conv((h, h[:num_dst]), edge_index, relation)`` computes them.

    Example:
        >>> indptr, indices = torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2])  # 2 -> 1 -> 0
        >>> nodes, hops = receptive_field(indptr, indices, torch.zeros(2), torch.tensor([0]), 2,
        ...                               torch.full((3,), -1))
        >>> nodes.tolist(), [(h[0].tolist(), h[2]) for h in hops]
        ([0, 1, 2], [([[1, 2], [0, 1]], 2), ([[1], [0]], 1)])
    """
    dst = seeds.to(torch.int64)
    hops = []
    for _ in range(layers):
        starts = indptr[dst]
        counts = indptr[dst + 1] - starts
        total = int(counts.sum())
        first = torch.repeat_interleave(starts - (torch.cumsum(counts, 0) - counts), counts)
        pos = first + torch.arange(total)
        src = indices[pos].to(torch.int64)
        dst_local = torch.repeat_interleave(torch.arange(dst.numel()), counts)
        scratch[dst] = torch.arange(dst.numel())
        new = torch.unique(src[scratch[src] < 0])
        scratch[new] = torch.arange(dst.numel(), dst.numel() + new.numel())
        edge_index = torch.stack([scratch[src], dst_local])
        nodes = torch.cat([dst, new])
        scratch[nodes] = -1
        hops.append((edge_index, edge_type[pos].to(torch.int64), dst.numel()))
        dst = nodes
    return dst, hops[::-1]


def _layers(model: Any, h: Tensor, graphs: list[tuple[Tensor, Tensor, int]], convs: Optional[list[Any]] = None) -> Tensor:
    """The R-GCN layers after the encoder, ReLU and dropout between them (``ReLUDropoutGNN``'s order): ``convs``,
    PyG's ``RGCNConv`` on graphdist's parameters (``RGCNLayer.to_pyg``; made here when not given)."""
    convs = convs if convs is not None else [layer.to_pyg() for layer in model.layers]
    for i, (conv, (edge_index, relation, num_dst)) in enumerate(zip(convs, graphs)):
        h = conv((h, h[:num_dst]), edge_index, relation)
        if i < model.num_layers - 1:
            h = F.dropout(F.relu(h), model.dropout, model.training)
    return h


def reference_run(graph: Any, seed: int, r: dict[str, Any]) -> dict[str, Any]:
    """Trains the reference R-GCN on ``graph``'s split; the test accuracy at the best-validation epoch.

    Args:
        graph: a typed graph (``load_graph``), its own masks.
        seed: seeds the initialisation, the shuffle and dropout.
        r: the recipe: ``hidden``, ``layers``, ``dropout``, ``lr``, ``weight_decay``, ``batch_size``,
            ``epochs``, ``max_steps`` (0: every batch).

    Returns:
        ``test_acc`` and ``val_acc`` (fractions) and ``epoch`` of the best epoch, ``wall_s``, the ``history``.
    """
    from graphdist.models.hetero import RGCN

    started = time.perf_counter()
    torch.manual_seed(seed)
    schema = graph.schema
    model = RGCN(graph.num_features, r["hidden"], graph.num_classes, r["layers"], dropout=r["dropout"],
                 schema=schema)
    for enc in model.encoder.encoders:  # plain PyG training: dense table gradients, torch's Adam moves every row
        if isinstance(enc, torch.nn.Embedding):
            enc.sparse = False
    opt = torch.optim.Adam(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    convs = [layer.to_pyg() for layer in model.layers]
    ids = torch.arange(graph.num_nodes)
    node_type, type_index = schema.node_type(ids), schema.type_index(ids)
    edge_type = graph.edge_type.to(torch.int64)
    whole = [(graph.edge_index(), edge_type, graph.num_nodes)] * r["layers"]
    train = graph.train_mask.nonzero().view(-1)
    scratch = torch.full((graph.num_nodes,), -1, dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    history = []
    for epoch in range(1, r["epochs"] + 1):
        model.train()
        batches = train[torch.randperm(train.numel(), generator=gen)].split(r["batch_size"])
        batches = batches[: r["max_steps"]] if r["max_steps"] else batches
        losses = []
        for seeds in batches:
            nodes, hops = receptive_field(graph.indptr, graph.indices, edge_type, seeds, r["layers"], scratch)
            h = model.encoder(graph.x[nodes], node_type[nodes], type_index[nodes])
            loss = F.cross_entropy(_layers(model, h, hops, convs), graph.y[seeds])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            pred = _layers(model, model.encoder(graph.x, node_type, type_index), whole, convs).argmax(1)
        acc = {f"{m}_acc": float((pred[mask] == graph.y[mask]).float().mean())
               for m, mask in (("val", graph.val_mask), ("test", graph.test_mask))}
        history.append({"epoch": epoch, "loss": sum(losses) / len(losses), "steps": len(batches), **acc})
    best = max(history, key=lambda rec: rec["val_acc"])
    return {"test_acc": best["test_acc"], "val_acc": best["val_acc"], "epoch": best["epoch"],
            "wall_s": time.perf_counter() - started, "history": history}


def export_for_dgl(graph: Any, path: Path) -> Path:
    """Writes ``graph`` as the ``.npz`` that ``bench/peers/dgl_rgcn.py`` reads (written aside, renamed).

    Written on every call (a second at 100k nodes): a generator that changed draws between two runs
    under the same name must not leave DGL training on the old graph.

    Keys: ``indptr``, ``indices`` (CSR, rows = destinations), ``edge_type`` (aligned with ``indices``),
    ``x`` (the padded table), ``node_type``, ``offsets``, ``widths``, ``y``, ``train`` (train ids),
    ``num_relations``.
    """
    s = graph.schema
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, indptr=graph.indptr.numpy(), indices=graph.indices.numpy(),
             edge_type=graph.edge_type.numpy(), x=graph.x.numpy(),
             node_type=s.node_type(torch.arange(graph.num_nodes)).to(torch.int8).numpy(),
             offsets=np.asarray(s.offsets, np.int64), widths=np.asarray(s.widths, np.int64), y=graph.y.numpy(),
             train=graph.train_mask.nonzero().view(-1).numpy(), num_relations=np.int64(s.num_relations))
    os.replace(tmp, path)
    return path


def check_partitions(run_dir: Path, graph: Any) -> None:
    """Raises unless the partitions a run trained on hold ``graph`` (as many nodes and edges, the same schema).

    graphdist keys a generated graph's cached partitions by its name (and generator version), so draws
    changed without a new ``GENERATOR_VERSION`` are served the old partitions while the reference trains
    on the new graph: seen once here (before the version was in the key), 10 points apart.
    """
    import yaml

    parts = Path(yaml.safe_load((run_dir / "config.yaml").read_text())["partitions"])
    meta = json.loads((parts / "meta.json").read_text())
    schema = graph.schema.to_dict() if graph.schema is not None else None
    if (meta["num_nodes"], meta["num_edges"], meta.get("schema")) != (graph.num_nodes, graph.num_edges, schema):
        raise RuntimeError(f"{parts} holds {meta['num_nodes']:,} nodes and {meta['num_edges']:,} edges, but "
                           f"{graph.name} has {graph.num_nodes:,} and {graph.num_edges:,} (or another schema): a "
                           f"stale cached partition of an older generator; remove it and run again")
