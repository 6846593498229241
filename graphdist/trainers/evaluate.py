"""Evaluation and prediction over partitions: exact full-neighbour outputs (the task scores them).

Models with ``layer_forward`` get :func:`exact_inference`: layer by layer over the whole
partition, each layer fetching the previous layer's halo embeddings from their owners
(one all-to-all per layer). Others get :func:`sampled_inference`: ``forward`` on
full-neighbour blocks in chunks (exact too, but each chunk materialises its L-hop
neighbourhood). Both are collectives: every rank calls them at the same point.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Optional

import torch

from graphdist import comm
from graphdist.models.registry import capabilities
from graphdist.trainers.features import model_inputs
from partition.part import Partition
from sampling.owners import OwnerMap

MASKS = ("train_mask", "val_mask", "test_mask")


def full_block(part: Partition) -> Any:
    """One block over the partition: inner rows (destinations) over inner + halo columns.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import load_partition, partition
        >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
        >>> b = full_block(part)
        >>> (b.num_dst, b.num_src, b.src.numel()) == (part.num_inner, part.num_local, int(part.indptr[-1]))
        True
    """
    from sampling.base import Block

    num_inner = part.num_inner
    indptr = part.indptr[: num_inner + 1].clone()
    src = part.indices[: int(indptr[-1])].to(torch.int64)
    dst = torch.repeat_interleave(torch.arange(num_inner), indptr[1:] - indptr[:-1], output_size=src.numel())
    block = Block(src=src, dst=dst, num_src=part.num_local, num_dst=num_inner, indptr=indptr)
    if part.schema is not None:  # a typed graph: every edge's relation, every node's type and row within it
        block.edge_type = part.edge_type[: src.numel()].to(torch.int64)
        block.node_type = part.schema.node_type(part.global_ids)
        block.type_index = part.schema.type_index(part.global_ids)
    return block


@torch.no_grad()
def exact_inference(
    model: torch.nn.Module,
    part: Partition,
    table: torch.Tensor,
    device: torch.device,
    with_degrees: bool,
    owners: Optional[OwnerMap] = None,
    keep_hidden: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Exact full-neighbour outputs (logits) of this rank's inner nodes, one layer at a time.

    Args:
        model: a model with ``num_layers`` and ``layer_forward(i, x, block)``.
        part: this worker's partition.
        table: ``[num_inner, F (+1)]`` its feature rows (with the degree column for GCN).
        device: where the layers run.
        with_degrees: ``table``'s last column holds global in-degrees (GCN's normalisation).
        owners: which rank serves each node (default: part ``p`` on rank ``p``).
        keep_hidden: also return the last hidden layer's output (the input of the final
            layer: the nodes' embeddings).
    """
    from sampling.distributed import fetch_rows, fetch_rows_async

    model.eval()
    block = full_block(part)
    halo_ids = part.global_ids[part.num_inner :]
    h = table
    if with_degrees:
        # Local table = inner rows then halo rows: the degree column of both, as one "x".
        halo_degrees = fetch_rows(part, h[:, -1:], halo_ids, group=None, tag="eval", owners=owners)
        h, (block,) = h[:, :-1], model_inputs(torch.cat([h[:, -1:], halo_degrees]), [block], True)[1]
    block = block.to(device)

    def fetch_halo(rows: torch.Tensor) -> Any:
        """Starts the exchange of the halo's rows of ``rows``; ``wait()`` gives them on ``device``."""
        pending = fetch_rows_async(part, rows.cpu(), halo_ids, group=None, tag="eval", owners=owners)
        return SimpleNamespace(wait=lambda: pending.wait().to(device))

    with_halo = capabilities(model).halo_layer
    hidden = h
    for i in range(model.num_layers):
        hidden = h
        if with_halo:  # the model chooses what crosses the network (LayerwiseGNN)
            h = model.layer_forward_with_halo(i, h.to(device), block, fetch_halo).cpu()
            continue
        halo = fetch_halo(h).wait()  # a model of a user's: its layer's input, halo rows after inner ones
        x = torch.cat([h.to(device), halo]) if halo.shape[0] else h.to(device)
        h = model.layer_forward(i, x, block).cpu()
    return (h, hidden) if keep_hidden else h


@torch.no_grad()
def sampled_inference(
    model: torch.nn.Module,
    neighbor_source: Any,
    features: Any,
    seeds: torch.Tensor,
    num_layers: int,
    device: torch.device,
    with_degrees: bool,
    chunk: int = 1024,
) -> torch.Tensor:
    """Full-neighbour outputs of some inner nodes (global ids) for models without ``layer_forward``.

    Every rank runs the same number of chunks (collectives inside).
    """
    from sampling.neighbor import NeighborSampler

    model.eval()
    sampler = NeighborSampler(neighbor_source, [-1] * num_layers, seed=0)
    chunks = max(comm.all_gather_object(math.ceil(seeds.numel() / chunk)))
    outs = []
    for i in range(chunks):
        batch = sampler.sample(seeds[i * chunk : (i + 1) * chunk])
        x = features.gather(batch.input_nodes)
        if batch.seed_nodes.numel():
            x, blocks = model_inputs(x, batch.blocks, with_degrees)
            outs.append(model(x.to(device), [b.to(device) for b in blocks]).cpu())
    return torch.cat(outs) if outs else torch.zeros(0)


def evaluated_nodes(part: Partition) -> torch.Tensor:
    """Local ids of the inner nodes in any of the train/val/test masks."""
    wanted = torch.zeros(part.num_inner, dtype=torch.bool)
    for name in MASKS:
        mask = getattr(part, name)
        if mask is not None:
            wanted |= mask.to(torch.bool)
    return wanted.nonzero().view(-1)


__all__ = ["MASKS", "evaluated_nodes", "exact_inference", "full_block", "sampled_inference"]
