"""Aggregation: local training sends only parameters; every epoch ends with one model everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, random_graph


def _cfg(**kw) -> TrainConfig:
    # No feature cache: correction steps must fetch remote rows (a cache holding every row a batch may
    # read, as on a graph this small, would leave them nothing to fetch).
    base = dict(strategy="aggregation", model="sage", hidden=8, layers=2, fanouts=(4, 4), dropout=0.0,
                batch_size=16, avg_every=2, lr=0.01, num_workers=2, prefetch=False, seed=1, timeout=20, cache_rows=0)
    return TrainConfig(**{**base, **kw})


def _body(rank: int, world_size: int, part_dir: str) -> None:
    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    for correction, overlap in ((0, False), (2, False), (0, True)):
        strategy = build_strategy(rank, world_size, _cfg(correction_steps=correction, avg_overlap=overlap), part_dir)
        steps = strategy.steps_per_epoch
        assert steps >= 4, steps
        for epoch in (1, 2):
            comm.reset_byte_counts()
            stats = strategy.train_epoch(epoch)
            sent = comm.byte_counts()
            # Averages at steps 2, 4, ... and at the epoch's end (once, even when K divides it).
            assert stats.extras["averages"] == (steps - 1) // 2 + 1, (stats.extras, steps)
            if correction:
                assert stats.extras["correction_steps"] == correction * stats.extras["averages"]
                assert sent.get("sample", 0) > 0 and sent.get("feature", 0) > 0 and sent.get("grad", 0) > 0
            else:
                # Training alone: parameters are all that moves.
                assert set(sent) == {"param"}, sent
            params = comm.all_gather_object([p.detach().clone() for p in strategy.model.parameters()])
            assert all(torch.equal(a, b) for a, b in zip(params[0], params[1])), (correction, epoch, [float((a - b).abs().max()) for a, b in zip(params[0], params[1])])
        result = strategy.evaluate()
        assert result["test_acc"] > 0.0
        strategy.close()


def test_local_training_moves_only_parameters_and_ends_each_epoch_averaged(tmp_path):
    from partition.api import partition

    part_dir = partition(_graph(), 2, method="random", out=Path(tmp_path) / "parts", seed=0)
    launch(_body, 2, str(part_dir), timeout=120)


def _graph():
    graph = random_graph(200, avg_degree=5, seed=5, feature_dim=6)
    graph.x = torch.randn(graph.num_nodes, 6, generator=torch.Generator().manual_seed(0))
    return graph


def test_aggregation_resume_is_bit_identical(tmp_path):
    from graphdist.api import train
    from partition.api import partition

    graph = _graph()
    part_dir = partition(graph, 2, method="super", out=Path(tmp_path) / "parts", seed=0)
    common = dict(strategy="aggregation", hidden=8, fanouts=(4, 4), batch_size=16, avg_every=3, correction_steps=1,
                  dropout=0.3, num_workers=2, timeout=30, eval_every=2)
    whole = train(None, part_dir, epochs=4, run_dir=str(tmp_path / "whole"), **common)
    train(None, part_dir, epochs=2, run_dir=str(tmp_path / "half"), **common)
    resumed = train(None, part_dir, epochs=4, resume=str(tmp_path / "half"), **common)
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history], (resumed.history, whole.history)
    assert resumed.history[-1]["test_acc"] == whole.history[-1]["test_acc"]
    assert resumed.history[-1]["label_tvd"] == pytest.approx(whole.history[-1]["label_tvd"])
