"""``--task link``: link prediction on a partition made with ``--task link`` (``partition/edges.py``).

Training (``minibatch`` only): each worker's items are the supervision edges its parts own; a
batch of them, with ``--num-negatives`` negatives each (``--neg-sampling uniform|degree``), goes
through ``sampling.link.LinkSampler``, which samples both ends' neighbourhoods with the run's own
node sampler (the distributed one: an end owned elsewhere is sampled by its owner, as any
frontier node). The model is the node encoder wrapped in ``models.link.LinkPredictor``
(``--decoder dot|mlp``); the loss is binary cross-entropy over the pairs, and the gradient
average is weighted by pairs. ``--batch-size`` counts positive edges per step over all workers.

Evaluation: every node's embedding, exact (layer at a time, or full-neighbour blocks for a model
without ``layer_forward``); then each worker scores its own held-out edges and their stored
negatives, fetching the embeddings of the other ends from their owners (one collective per
split). Metrics over all workers: ``val_auc``/``test_auc`` (ROC AUC of every held-out edge
against every stored negative), ``val_mrr``/``test_mrr`` (the positive's reciprocal rank among
its own negatives, ties counted half) and ``val_hits@K``/``test_hits@K`` (``--hits-k``; the share
of positives ranked within the first K). The best epoch is the one with the highest ``val_auc``.

Example:
    >>> roc_auc(torch.tensor([0.9, 0.4]), torch.tensor([0.1, 0.4, 0.8]))  # 4.5 of the 6 pairs ordered right
    0.75
    >>> rank_metrics(torch.tensor([0.5, 0.1]), torch.tensor([[0.2, 0.9], [0.3, 0.4]]), hits_k=1)
    (0.8333333333333333, 0.0, 2)
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F

from graphdist import comm
from graphdist.models.registry import capabilities
from graphdist.section import fail_at
from graphdist.trainers.features import model_inputs
from graphdist.trainers.task_base import Task

_SCORE_CHUNK = 2048  # held-out edges scored at once: bounds the [chunk * K, H] negatives' embeddings


def roc_auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC: the chance a positive scores above a negative (ties count half); nan without both.

    Mann-Whitney's rank sum with average ranks for ties: ``O((P + N) log(P + N))``.
    """
    if pos.numel() == 0 or neg.numel() == 0:
        return float("nan")
    scores = torch.cat([pos, neg]).to(torch.float64)
    values, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).to(torch.float64)
    average_rank = ends - (counts.to(torch.float64) - 1) / 2  # 1-based ranks, ties share their mean
    rank_sum = float(average_rank[inverse[: pos.numel()]].sum())
    p, n = pos.numel(), neg.numel()
    return (rank_sum - p * (p + 1) / 2) / (p * n)


def rank_metrics(pos: torch.Tensor, neg: torch.Tensor, hits_k: int) -> tuple[float, float, int]:
    """``(sum of reciprocal ranks, positives within the first hits_k, positives)`` of each positive among
    its own negatives (``neg[i]`` are positive ``i``'s); a tie with a negative counts half a place."""
    if pos.numel() == 0:
        return 0.0, 0.0, 0
    above = (neg > pos[:, None]).sum(dim=1).to(torch.float64)
    ties = (neg == pos[:, None]).sum(dim=1).to(torch.float64)
    rank = 1.0 + above + 0.5 * ties
    return float((1.0 / rank).sum()), float((rank <= hits_k).sum()), int(pos.numel())


class LinkPrediction(Task):
    """Scores pairs of nodes; see the module doc.

    Args:
        meta: the partition's ``meta.json`` (it must hold a link split).
        cfg: the run's ``TrainConfig`` (decoder, negatives, hits K, hidden width).

    Raises:
        ValueError: a partition made without ``--task link``.
    """

    name = "link"
    best_key = "val_auc"
    items = "edges"

    def __init__(self, meta: dict[str, Any], cfg: Any) -> None:
        if meta.get("task") != "link":
            raise fail_at("task", "link", "the partition holds no edge split (its graph still has every edge); "
                          "partition with graphdist-partition --task link, or let graphdist-train partition "
                          "{0} on the fly", ("dataset", None))
        self.meta, self.cfg = meta, cfg
        self._edges: Optional[Any] = None

    # ------------------------------------------------------------ the model
    def out_dim(self, meta: dict[str, Any], hidden: int) -> int:
        return int(hidden)  # the encoder's output is the embedding the decoder scores

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The encoder with ``--decoder`` (a ``LinkPredictor`` given by the user is kept as it is)."""
        from graphdist.models.link import LinkPredictor

        if isinstance(model, LinkPredictor):
            return model
        return LinkPredictor(model, decoder=self.cfg.decoder, hidden=self.cfg.hidden)

    # ------------------------------------------------------------ a step
    def loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(out, y.to(out.dtype), reduction=reduction)

    def count_correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((out > 0) == (y > 0.5)).sum()

    def predict(self, out: torch.Tensor) -> torch.Tensor:
        return out > 0

    def empty_prediction(self, rows: int, classes: int) -> torch.Tensor:
        raise NotImplementedError("link prediction scores pairs, not nodes")

    def metrics(self, pred: torch.Tensor, part: Any) -> dict[str, float]:
        raise NotImplementedError("link prediction is scored by LinkPrediction.evaluate")

    def batch_weight(self, batch: Any) -> int:
        return int(batch.meta["pair_labels"].numel())

    def batch_loss(self, model: torch.nn.Module, batch: Any, with_degrees: bool,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Any]:
        x, blocks = model_inputs(batch.x, batch.blocks, with_degrees)
        pairs, labels = batch.meta["pairs"].to(device), batch.meta["pair_labels"].to(device)
        scores = model(x, blocks, pairs)
        if not labels.numel():
            return scores.sum() * 0.0, scores, 0.0
        return self.loss(scores, labels), scores, self.count_correct(scores.detach(), labels)

    # ------------------------------------------------------------ the loader
    def edges(self, ctx: Any) -> Any:
        """This rank's link edges (its parts' files), loaded once."""
        if self._edges is None:
            from partition.edges import load_link_edges

            self._edges = load_link_edges(ctx.partitions, ctx.plan.of(ctx.rank).parts, self.meta)
        return self._edges

    def train_items(self, ctx: Any, part: Any) -> torch.Tensor:
        """Positions in this rank's supervision edges (what the loader shuffles and batches)."""
        return torch.arange(self.edges(ctx).train.shape[1])

    def train_sampler(self, sampler: Any, ctx: Any, seed: int) -> Any:
        """The node sampler wrapped to sample the ends of edge batches and their negatives."""
        from sampling.link import LinkSampler

        degree = None
        if self.cfg.neg_sampling == "degree":
            from partition.edges import load_degree

            degree = load_degree(ctx.partitions)
        return LinkSampler(sampler, self.edges(ctx).train, int(self.meta["num_nodes"]),
                           num_negatives=self.cfg.num_negatives, negative=self.cfg.neg_sampling, degree=degree,
                           seed=seed)

    def train_labels(self, part: Any) -> None:
        return None  # pairs carry their own labels

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, part: Any, batches: Any, device: torch.device,
                 with_degrees: bool) -> dict[str, float]:
        """AUC, MRR and Hits@K of the held-out edges over all workers (collective)."""
        h = self.embed(model, part, batches, device, with_degrees)
        edges = self.edges(batches.ctx)
        out: dict[str, float] = {}
        for name, pos_edges, negatives in (("val", edges.val, edges.val_neg), ("test", edges.test, edges.test_neg)):
            pos, neg = self._score(model, part, batches, h, pos_edges, negatives, device)
            out.update(self._reduce(name, pos, neg))
        return out

    def embed(self, model: torch.nn.Module, part: Any, batches: Any, device: torch.device,
              with_degrees: bool) -> torch.Tensor:
        """Every inner node's embedding ``[num_inner, H]``, exact."""
        from graphdist.trainers.evaluate import exact_inference, sampled_inference

        model.eval()
        if capabilities(model).layer_forward:
            return exact_inference(model, part, batches.features.x, device, with_degrees, owners=batches.owners)
        return sampled_inference(model.encoder, batches.neighbor_source, batches.features, part.inner_global_ids(),
                                 self.cfg.layers, device, with_degrees)

    def _score(self, model: torch.nn.Module, part: Any, batches: Any, h: torch.Tensor, pos_edges: torch.Tensor,
               negatives: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of this rank's held-out edges ``[E]`` and of their negatives ``[E, K]``."""
        from sampling.distributed import fetch_rows

        ids = torch.cat([pos_edges.reshape(-1), negatives.reshape(-1)])
        nodes, where = torch.unique(ids, return_inverse=True)
        rows = fetch_rows(part, h, nodes, group=None, tag="eval", owners=batches.owners)  # collective
        e, k = pos_edges.shape[1], negatives.shape[1]
        u, v, w = where[:e], where[e : 2 * e], where[2 * e :].view(e, k)
        pos, neg = torch.empty(e), torch.empty(e, k)
        for start in range(0, e, _SCORE_CHUNK):
            s = slice(start, start + _SCORE_CHUNK)
            h_u = rows[u[s]].to(device)
            pos[s] = model.score(h_u, rows[v[s]].to(device)).cpu()
            h_w = rows[w[s].reshape(-1)].to(device)
            neg[s] = model.score(h_u.repeat_interleave(k, dim=0), h_w).view(-1, k).cpu()
        return pos, neg

    def _reduce(self, name: str, pos: torch.Tensor, neg: torch.Tensor) -> dict[str, float]:
        """The split's metrics over all workers: AUC from every score, MRR and hits from summed counts."""
        hits_k = int(self.cfg.hits_k)
        gathered = comm.all_gather_object((pos, neg.reshape(-1)))
        auc = roc_auc(torch.cat([g[0] for g in gathered]), torch.cat([g[1] for g in gathered]))
        sums = torch.tensor(rank_metrics(pos, neg, hits_k), dtype=torch.float64)
        reciprocal, hits, count = comm.all_reduce(sums, tag="eval").tolist()
        return {f"{name}_auc": auc, f"{name}_mrr": reciprocal / count if count else math.nan,
                f"{name}_hits@{hits_k}": hits / count if count else math.nan}


__all__ = ["LinkPrediction", "rank_metrics", "roc_auc"]
