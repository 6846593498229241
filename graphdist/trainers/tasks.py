"""The tasks (``--task``): what a run learns, behind every strategy's training step and evaluation.

A strategy owns how a step is scheduled and synchronised; its task owns what the step computes
and how a model is scored:

- ``node`` with class labels (``y`` of shape ``[N]``): cross-entropy, accuracy, the best epoch by
  ``val_acc``;
- ``node`` with a multi-label ``y`` (``[N, C]`` of 0/1, the partition's ``meta.json`` says
  ``multilabel``): a sigmoid per label, binary cross-entropy, micro-F1 (``val_f1``, ``test_f1``);
- ``link`` (``trainers/link.py``): link prediction on a partition made with ``--task link``.

Each implements ``Task`` (``trainers/task_base.py``); :func:`make_task` picks one.

The loop picks the best epoch by the task's ``best_key``; ``runlog.best_key`` finds it in a record.

Example:
    >>> task = make_task("node", {"multilabel": True})
    >>> task.name, task.best_key
    ('multilabel', 'val_f1')
    >>> float(task.loss(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.uint8)))  # log 2 per label
    0.6931471824645996
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from graphdist import comm
from graphdist.section import fail, fail_at
from graphdist.trainers.evaluate import MASKS
from graphdist.trainers.task_base import Task
from partition.part import Partition


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
        ConfigError: an unknown name, or a partition made for the other task (one line naming the fix).
    """
    partition_task = meta.get("task") or "node"
    if name == "node":
        if partition_task == "link":
            raise fail_at("task", "node", "the partition was made for link prediction (its message-passing graph "
                          "lacks the held-out edges); partition again without {0}", ("task", "link"))
        return MultiLabel() if meta.get("multilabel") else SingleLabel()
    if name == "link":
        from graphdist.trainers.link import LinkPrediction

        return LinkPrediction(meta, cfg)
    raise fail("task", "must be one of node, link", name)


__all__ = ["MultiLabel", "SingleLabel", "Task", "make_task", "micro_f1"]
