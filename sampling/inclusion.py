"""Vertex inclusion probability (SALIENT++): how likely each node is to be an input of one of this worker's
batches, which decides what the remote-feature cache holds.

A worker draws ``b`` of its ``S`` train seeds per batch, so a seed is in a batch with probability
``p_0 = b / S``. Each node ``v`` at hop ``h`` samples ``min(k_h, d_v)`` of its ``d_v``
in-neighbours uniformly (``k_h``: the fan-out of that hop, seeds outward; -1: all), so an
in-neighbour ``u`` is reached through ``v`` with probability ``p_h(v) min(1, k_h / d_v)`` and,
taking the draws as independent,

    p_{h+1}(u) = 1 - prod_{v: u in N(v)} (1 - q_h(v) min(1, k_h / d_v)),

where ``q_h(v) = 1 - prod_{j <= h} (1 - p_j(v))`` is the chance that ``v`` is in the layer at all
(the sampler's hop-``h+1`` destinations are every node of the layer before, seeds included), and
``u`` is an input of the batch with probability ``q_L(u)``. The draws are not independent (a seed's
neighbour may sample the seed back), so seeds come out a few points high; remote nodes, the
cache's candidates, within a few points of sampled frequencies (a test checks both). A row is fetched
at most once per batch, so caching the remote nodes with the highest inclusion probability
maximises the expected hits: 1-hop and 2-hop remote nodes alike, where the degree policy saw the
halo only. Rows of remote frontier nodes live on their owners: each hop sends
``(node, probability)`` to the owners, which apply their rows and answer the log-products per
in-neighbour (one ``all_to_all_v`` there and one back per hop), so this costs one sampling
pass's worth of traffic, once, at start.

Example:
    >>> import tempfile
    >>> from graphdist.testing import one_rank_group, tiny_graph
    >>> from partition.api import load_partition, partition
    >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
    >>> with one_rank_group():
    ...     nodes, prob = inclusion_probability(part, torch.tensor([0]), 1, [-1])
    >>> sorted(nodes.tolist()), prob.max().item()  # seed 0 always, its 3 in-neighbours always
    ([0, 1, 4, 9], 1.0)
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from graphdist import comm
from graphdist.data.graph import ranges
from partition.part import Partition
from sampling.owners import OwnerMap

__all__ = ["inclusion_probability"]


def inclusion_probability(
    part: Partition,
    seeds: Tensor,
    batch_size: int,
    fanouts: Sequence[int],
    owners: Optional[OwnerMap] = None,
    group: object = None,
) -> tuple[Tensor, Tensor]:
    """The nodes this worker's batches may read and the probability that one batch reads each (collective).

    Args:
        part: this worker's partition (the rows it serves to the others' computation too).
        seeds: int64 global ids of this worker's train seeds.
        batch_size: seeds per batch (this worker's share).
        fanouts: neighbours sampled per hop, from the seeds outward (-1: all).
        owners: which rank serves each node (default: part ``p`` on rank ``p``).
        group: process group.

    Returns:
        ``(nodes, probability)``: sorted global ids (seeds included) and float64 probabilities.
    """
    owners = owners if owners is not None else OwnerMap.from_parts(part.part_offsets)
    seeds = seeds.to(torch.int64)
    p0 = min(1.0, batch_size / max(1, seeds.numel())) if seeds.numel() else 0.0
    # log P(u is not among the batch's nodes so far), dense over every node: 0 unreached, -inf certain.
    # Dense (8 bytes a node) rather than sorted id lists: merging lists of millions of ids costs sorts
    # and copies several times larger.
    log_missed = torch.zeros(owners.num_nodes, dtype=torch.float64)
    log_missed[seeds] = math.log1p(-p0) if p0 < 1 else -math.inf
    for fanout in fanouts:
        # Every node of the layer so far samples the next hop (the sampler's destinations are all of
        # the previous layer's sources, seeds included), with the probability it is in that layer.
        reached = (log_missed != 0).nonzero().view(-1)
        nodes, log_keep = _hop(part, owners, reached, -torch.expm1(log_missed[reached]), int(fanout), group)
        log_missed.index_add_(0, nodes, log_keep)
    reached = (log_missed != 0).nonzero().view(-1)
    return reached, -torch.expm1(log_missed[reached])


def _hop(part: Partition, owners: OwnerMap, nodes: Tensor, prob: Tensor, fanout: int,
         group: object) -> tuple[Tensor, Tensor]:
    """One hop: ``(in-neighbours reached, log prod (1 - p(v) min(1, k/d_v)))`` over the frontier ``v``."""
    keep = prob > 0
    nodes, prob = nodes[keep], prob[keep]
    if owners.world_size == 1:
        return _apply_rows(part, nodes, prob, fanout)
    groups, order = owners.split(nodes)
    probs = torch.split(prob.index_select(0, order), [g.numel() for g in groups])
    requests = [torch.stack([g.to(torch.float64), q], dim=1) for g, q in zip(groups, probs)]
    asked = comm.all_to_all_v(requests, group=group, tag="init")  # float64 holds ids below 2^53 exactly
    del requests
    answers = [torch.stack(_apply_rows(part, a[:, 0].to(torch.int64), a[:, 1], fanout), dim=1) if a.numel()
               else torch.zeros((0, 2), dtype=torch.float64) for a in asked]
    del asked
    merged = torch.cat(comm.all_to_all_v(answers, group=group, tag="init"))
    return merged[:, 0].to(torch.int64), merged[:, 1]  # ids may repeat (one per owner): index_add sums them


_CHUNK_EDGES = 1 << 22  # rows applied at once hold this many edges: bounded temporaries on large parts


def _apply_rows(part: Partition, nodes: Tensor, prob: Tensor, fanout: int) -> tuple[Tensor, Tensor]:
    """Own rows ``nodes`` (global ids): their in-neighbours and each one's summed ``log(1 - p min(1, k/d))``.

    The sums gather in a dense array over the part's local ids (its in-neighbours are all local:
    inner or halo), a chunk of rows at a time.
    """
    local = part.inner_local(nodes)
    indptr = part.indptr
    starts, ends = indptr.index_select(0, local), indptr.index_select(0, local + 1)
    counts = ends - starts
    share = (torch.ones(counts.numel(), dtype=torch.float64) if fanout < 0
             else (fanout / counts.to(torch.float64).clamp(min=1)).clamp(max=1.0))
    factor = torch.log1p(-(prob * share))  # -inf where certain: sums stay -inf, expm1 gives -1
    sums = torch.zeros(part.num_local, dtype=torch.float64)
    touched = torch.zeros(part.num_local, dtype=torch.bool)
    edge_ends = torch.cumsum(counts, 0)
    first = 0
    while first < counts.numel():
        done = int(edge_ends[first - 1]) if first else 0
        last = max(first + 1, int(torch.searchsorted(edge_ends, done + _CHUNK_EDGES, right=True)))
        rows = slice(first, last)
        columns = part.indices.index_select(0, ranges(starts[rows], counts[rows])).to(torch.int64)
        sums.index_add_(0, columns, torch.repeat_interleave(factor[rows], counts[rows]))
        touched[columns] = True
        first = last
    reached = touched.nonzero().view(-1)
    return part.global_ids.index_select(0, reached), sums[reached]
