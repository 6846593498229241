"""``Task``: what a run learns (``--task``), behind every strategy's training step and evaluation.

A strategy owns how a step is scheduled and synchronised; its task owns what the step computes
and how a model is scored:

- ``node`` with class labels (``y`` of shape ``[N]``): cross-entropy, accuracy, the best epoch by
  ``val_acc``;
- ``node`` with a multi-label ``y`` (``[N, C]`` of 0/1, the partition's ``meta.json`` says
  ``multilabel``): a sigmoid per label, binary cross-entropy, micro-F1 (``val_f1``, ``test_f1``);
- ``link`` (``trainers/link.py``): link prediction on a partition made with ``--task link``.

The loop picks the best epoch by the task's ``best_key``; ``runlog.best_key`` finds it in a record.

Example:
    >>> task = make_task("node", {"multilabel": True})
    >>> task.name, task.best_key
    ('multilabel', 'val_f1')
    >>> float(task.loss(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.uint8)))  # log 2 per label
    0.6931471824645996
"""

from __future__ import annotations

import abc
from typing import Any, Optional

import torch
import torch.nn.functional as F

from graphdist import comm
from graphdist.trainers.evaluate import MASKS
from graphdist.trainers.features import model_inputs
from partition.part import Partition


class Task(abc.ABC):
    """The loss of a step and the metrics of an evaluation.

    Attributes:
        name: the task's name in logs.
        best_key: the validation metric that picks the best epoch (higher is better).
    """

    name: str = ""
    best_key: str = "val_acc"
    items: str = "seeds"  # what a batch is made of (logs; a link batch's items are edges)

    def out_dim(self, meta: dict[str, Any], hidden: int) -> int:
        """The model's output width for a partition's ``meta.json`` (classes by default)."""
        return int(meta.get("num_classes") or 0)

    @abc.abstractmethod
    def loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """The training loss of outputs ``out`` against labels ``y`` (``mean`` over rows, or ``sum``)."""

    @abc.abstractmethod
    def count_correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """How many rows were predicted right (the epoch's ``train_acc`` numerator), as a 0-d tensor
        on ``out``'s device: the step loop reads it when it needs the number, not every step."""

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> float:
        """:meth:`count_correct` as a number."""
        return float(self.count_correct(out, y))

    @abc.abstractmethod
    def predict(self, out: torch.Tensor) -> torch.Tensor:
        """The prediction of each row of outputs."""

    @abc.abstractmethod
    def empty_prediction(self, rows: int, classes: int) -> torch.Tensor:
        """Predictions for ``rows`` nodes none of which is predicted yet (filled in by evaluation)."""

    @abc.abstractmethod
    def metrics(self, pred: torch.Tensor, part: Partition) -> dict[str, float]:
        """Train (full-neighbour), val and test metrics over all workers (collective: every rank calls it)."""

    def batch_weight(self, batch: Any) -> int:
        """What a step's gradient is averaged over (its seeds): the seed-weighted sync's weight."""
        return int(batch.seed_nodes.numel())

    # What a mini-batch worker trains on: node tasks keep the node loader's seeds, sampler and labels;
    # link prediction batches edges instead (trainers/link.py).
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model trained for this task, built around the node model (node tasks: the model itself)."""
        return model

    def train_items(self, ctx: Any, part: Partition) -> torch.Tensor:
        """What this worker's loader batches: its train nodes (global ids)."""
        return part.mask_global_ids("train_mask")

    def train_sampler(self, sampler: Any, ctx: Any, seed: int) -> Any:
        """The sampler the loader calls on a batch of items (node tasks: the node sampler)."""
        return sampler

    def train_labels(self, part: Partition) -> Optional[Any]:
        """Labels by global id of the worker's train nodes (and seeds handed over later)."""
        from graphdist.trainers.features import GlobalLabels

        if part.y is None:
            return None
        return GlobalLabels(part.y if part.y.dim() == 2 else part.y.to(torch.int64), part.inner_local)

    def evaluate(self, model: torch.nn.Module, part: Partition, batches: Any, device: torch.device,
                 with_degrees: bool) -> dict[str, float]:
        """Metrics over all workers (collective): exact layer-wise inference, or full-neighbour blocks for
        models without ``layer_forward``."""
        from graphdist.trainers.evaluate import evaluated_nodes, exact_inference, sampled_inference

        if hasattr(model, "layer_forward"):
            out = exact_inference(model, part, batches.features.x, device, with_degrees, owners=batches.owners)
            return self.metrics(self.predict(out), part)
        nodes = evaluated_nodes(part)
        pred = self.empty_prediction(part.num_inner, int(part.meta.get("num_classes") or 0))
        out = sampled_inference(model, batches.neighbor_source, batches.features, part.inner_global_ids()[nodes],
                                batches.ctx.cfg.layers, device, with_degrees)
        if out.numel():
            pred[nodes] = self.predict(out)
        return self.metrics(pred, part)

    def batch_loss(self, model: torch.nn.Module, batch: Any, with_degrees: bool,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Forward of one sampled batch: ``(loss, outputs, rows right)``.

        A batch without seeds still runs forward and a zero loss, so backward issues every
        layer's collective as on the other ranks.
        """
        x, blocks = model_inputs(batch.x, batch.blocks, with_degrees)
        out = model(x, blocks)
        if not batch.seed_nodes.numel():
            return out.sum() * 0.0, out, torch.zeros(())
        return self.loss(out, batch.y), out, self.count_correct(out.detach(), batch.y)


class SingleLabel(Task):
    """One class per node: cross-entropy, accuracy.

    Example:
        >>> SingleLabel().correct(torch.tensor([[0.1, 0.9], [0.8, 0.2]]), torch.tensor([1, 1]))
        1.0
    """

    name = "node"
    best_key = "val_acc"

    def loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(out, y.to(torch.int64), reduction=reduction)

    def count_correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(dim=-1) == y).sum()

    def predict(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(dim=-1)

    def empty_prediction(self, rows: int, classes: int) -> torch.Tensor:
        return torch.full((rows,), -1, dtype=torch.int64)

    def metrics(self, pred: torch.Tensor, part: Partition) -> dict[str, float]:
        """Accuracy per mask over all workers (one all-reduce of counts; a mask no worker has gives nan)."""
        y = part.y.to(torch.int64)
        counts = []
        for name in MASKS:
            m = _mask(part, name, y.shape[0])
            counts += [float((pred[m] == y[m]).sum()), float(m.sum())]
        total = comm.all_reduce(torch.tensor(counts, dtype=torch.float64), tag="eval").tolist()
        return {"train_full_acc": _ratio(*total[0:2]), "val_acc": _ratio(*total[2:4]),
                "test_acc": _ratio(*total[4:6])}


class MultiLabel(Task):
    """A 0/1 row of labels per node: a sigmoid per label, binary cross-entropy, micro-F1.

    ``correct`` counts, per node, the share of its labels predicted right, so the epoch's
    ``train_acc`` is the label accuracy; evaluation reports micro-F1 (true positives, false
    positives and false negatives summed over every node and label before the ratio), which
    label imbalance does not flatter the way label accuracy is.

    Example:
        >>> task = MultiLabel()
        >>> task.correct(torch.tensor([[2.0, -1.0]]), torch.tensor([[1, 1]]))
        0.5
    """

    name = "multilabel"
    best_key = "val_f1"

    def loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        per_node = F.binary_cross_entropy_with_logits(out, y.to(out.dtype), reduction="none").mean(dim=-1)
        return per_node.sum() if reduction == "sum" else per_node.mean()

    def count_correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((out > 0) == y.to(torch.bool)).to(torch.float64).mean(dim=-1).sum()

    def predict(self, out: torch.Tensor) -> torch.Tensor:
        return out > 0

    def empty_prediction(self, rows: int, classes: int) -> torch.Tensor:
        return torch.zeros(rows, classes, dtype=torch.bool)

    def metrics(self, pred: torch.Tensor, part: Partition) -> dict[str, float]:
        """Micro-F1 per mask over all workers (one all-reduce of tp, fp, fn)."""
        y = part.y.to(torch.bool)
        counts = []
        for name in MASKS:
            m = _mask(part, name, y.shape[0])
            p, t = pred[m], y[m]
            counts += [float((p & t).sum()), float((p & ~t).sum()), float((~p & t).sum())]
        total = comm.all_reduce(torch.tensor(counts, dtype=torch.float64), tag="eval").tolist()
        return {"train_full_f1": micro_f1(*total[0:3]), "val_f1": micro_f1(*total[3:6]),
                "test_f1": micro_f1(*total[6:9])}


def micro_f1(tp: float, fp: float, fn: float) -> float:
    """``2 tp / (2 tp + fp + fn)``; nan when there is nothing to score.

    Example:
        >>> micro_f1(3, 1, 1)
        0.75
    """
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else float("nan")


def _mask(part: Partition, name: str, rows: int) -> torch.Tensor:
    mask = getattr(part, name)
    return mask.to(torch.bool) if mask is not None else torch.zeros(rows, dtype=torch.bool)


def _ratio(correct: float, n: float) -> float:
    return correct / n if n else float("nan")


def make_task(name: str, meta: dict[str, Any], cfg: Optional[Any] = None) -> Task:
    """The task ``--task name`` runs on a partition with this ``meta.json``.

    Args:
        name: ``node`` or ``link``.
        meta: the partition directory's ``meta.json`` (``multilabel`` picks the node task's kind).
        cfg: the run's ``TrainConfig`` (the link task reads its decoder and negatives from it).

    Raises:
        ValueError: an unknown name, or a partition made for the other task (one line naming the fix).
    """
    partition_task = meta.get("task") or "node"
    if name == "node":
        if partition_task == "link":
            raise ValueError("--task node: the partition was made for link prediction (its message-passing graph "
                             "lacks the held-out edges); partition again without --task link")
        return MultiLabel() if meta.get("multilabel") else SingleLabel()
    if name == "link":
        from graphdist.trainers.link import LinkPrediction

        return LinkPrediction(meta, cfg)
    raise ValueError(f"--task must be one of node, link (got {name!r})")


__all__ = ["MultiLabel", "SingleLabel", "Task", "make_task", "micro_f1"]
