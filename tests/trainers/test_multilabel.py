"""Multi-label node classification: a [N, C] 0/1 y from the generator, npz and PyG to the partition format,
BCE and micro-F1 in every strategy, the best epoch by val_f1."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import torch

import graphdist as gd
from graphdist.data.readers.npz import load_npz
from graphdist.testing import one_rank_group
from graphdist.trainers.tasks import MultiLabel, SingleLabel, make_task, micro_f1
from partition.api import load_partition, partition, partition_stats, read_meta


def test_generator_adds_a_second_label_to_half_the_nodes_and_keeps_the_graph():
    single = gd.synthetic(1000, avg_degree=6, num_features=8, num_classes=4, seed=3)
    multi = gd.synthetic(1000, avg_degree=6, num_features=8, num_classes=4, seed=3, multilabel=True)
    assert torch.equal(single.indptr, multi.indptr) and torch.equal(single.indices, multi.indices)
    assert torch.equal(single.train_mask, multi.train_mask)
    assert multi.y.shape == (1000, 4) and multi.y.dtype == torch.uint8
    assert torch.equal(multi.y[torch.arange(1000), single.y], torch.ones(1000, dtype=torch.uint8))
    labels = multi.y.sum(dim=1)
    assert int(labels.min()) >= 1 and int(labels.max()) <= 2
    assert 0.3 < float((labels == 2).float().mean()) < 0.6  # half draw a second label, 1/4 of those repeat the first
    moved = (multi.x != single.x).any(dim=1)  # a second label adds its centroid (some repeat the first label)
    assert bool(moved[labels == 2].all()) and 0.4 < float(moved.float().mean()) < 0.6


def test_npz_reads_a_multilabel_matrix(tmp_path):
    path = tmp_path / "ml.npz"
    y = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]], dtype=np.int64)
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), x=np.ones((3, 2), dtype=np.float32), y=y)
    g = load_npz(path)
    assert g.multilabel and g.num_classes == 3 and g.y.tolist() == y.tolist()
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), y=y * 2)
    with pytest.raises(ValueError, match="ml.npz: y: a \\[N, C\\] multi-label matrix holds 0 and 1 only"):
        load_npz(path)


def test_partition_format_2_stores_the_matrix_and_the_label_occurrence_mix(tmp_path):
    graph = gd.synthetic(600, avg_degree=6, num_features=8, num_classes=3, seed=1, multilabel=True)
    out = partition(graph, 2, method="random", out=tmp_path / "p")
    meta = read_meta(out)
    assert meta["format_version"] >= 2 and meta["multilabel"] and meta["num_classes"] == 3  # format 2 added it
    part = load_partition(out, 1)
    rows = part.inner_global_ids()
    original = part.orig_ids[rows]
    assert part.y.dtype == torch.uint8 and torch.equal(part.y, graph.y[original])
    assert meta["parts"][1]["label_counts"] == graph.y[original].sum(dim=0).tolist()
    stats = partition_stats(out)
    occurrences = np.array([p["label_counts"] for p in meta["parts"]], dtype=float)
    share = occurrences / occurrences.sum(axis=1, keepdims=True)
    overall = occurrences.sum(axis=0) / occurrences.sum()
    assert stats.label_tvd == pytest.approx(list(0.5 * np.abs(share - overall).sum(axis=1)))


def test_a_format_1_directory_still_reads(tmp_path):
    out = partition(gd.synthetic(300, avg_degree=4, num_features=4, num_classes=3, seed=0), 2, method="random",
                    out=tmp_path / "p")
    meta = json.loads((out / "meta.json").read_text())
    meta["format_version"] = 1
    del meta["multilabel"]
    (out / "meta.json").write_text(json.dumps(meta))
    assert load_partition(out, 0).y.dtype == torch.int64
    assert isinstance(make_task("node", read_meta(out)), SingleLabel)


def test_bce_and_micro_f1_over_masks():
    task = MultiLabel()
    out = torch.tensor([[3.0, -2.0, 1.0], [-1.0, 2.0, -3.0]])
    y = torch.tensor([[1, 0, 0], [1, 1, 0]], dtype=torch.uint8)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out, y.float())
    assert float(task.loss(out, y)) == pytest.approx(float(expected))
    assert task.correct(out, y) == pytest.approx(2 / 3 + 2 / 3)

    from types import SimpleNamespace

    part = SimpleNamespace(y=y, train_mask=torch.tensor([True, True]), val_mask=torch.tensor([True, False]),
                           test_mask=None)  # the fields metrics reads
    with one_rank_group():
        metrics = task.metrics(task.predict(out), part)
    # train: predicted {(0,0), (0,2), (1,1)}, true {(0,0), (1,0), (1,1)}: tp 2, fp 1, fn 1
    assert metrics["train_full_f1"] == pytest.approx(micro_f1(2, 1, 1)) == pytest.approx(2 / 3)
    assert metrics["val_f1"] == pytest.approx(micro_f1(1, 1, 0))
    assert np.isnan(metrics["test_f1"])


@pytest.mark.parametrize("strategy, epochs, eval_every", [("minibatch", 8, 4), ("fullgraph", 40, 20)])
def test_two_workers_learn_multilabel_and_keep_the_best_f1_epoch(tmp_path, strategy, epochs, eval_every):
    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        res = gd.train(None, dataset="synthetic-2000-multilabel", num_workers=2, strategy=strategy, epochs=epochs,
                       hidden=32, batch_size=128, lr=0.01, eval_every=eval_every, run_dir=str(run))
    final = res.final
    assert "val_acc" not in final and final["val_f1"] > 0.5 and final["test_f1"] > 0.5  # all-zeros scores 0
    status = json.loads((run / "run.json").read_text())
    assert status["best_metric"] == "val_f1" and status["best_epoch"] == res.best["epoch"]
    if strategy == "minibatch":
        pred = np.load(_predict(run))["pred"]
        assert pred.shape == (2000, 16) and pred.dtype == np.uint8


def _predict(run):
    from graphdist.predict import predict

    with contextlib.redirect_stdout(io.StringIO()):
        return predict(str(run))
