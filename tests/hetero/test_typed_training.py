"""Training typed graphs: 2 workers equal one process (R-GCN, full fan-out, one batch a step), a typed npz
trains from the command line with --model rgcn and defaults, a resume is bit-identical, and what is not
built for typed graphs is refused in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, typed_random_graph

STEPS = 3


def _cfg(sync: str, model: str) -> TrainConfig:
    # Full fan-out, every train node in one batch, no dropout: the 2-worker step computes one process's loss.
    return TrainConfig(model=model, hidden=8, layers=2, fanouts=(-1, -1), dropout=0.0, batch_size=10_000, lr=0.05,
                       sync=sync, epochs=STEPS, num_workers=2, prefetch=False, seed=3, timeout=30, num_bases=2
                       if model == "rgcn" else 0)


def _one_process(graph, cfg: TrainConfig) -> list[torch.Tensor]:
    """Plain torch on the whole graph: PyG's RGCNConv over every edge, STEPS steps of the trainers' Adam (the
    embedding tables' rows move only where touched: trainers/row_adam.py)."""
    from graphdist.models.hetero import RGCN
    from graphdist.trainers.base import adam

    torch.manual_seed(cfg.seed)
    model = RGCN(graph.num_features, cfg.hidden, graph.num_classes, cfg.layers, dropout=0.0, schema=graph.schema,
                 num_bases=cfg.num_bases)
    opt = adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ids = torch.arange(graph.num_nodes)
    train = graph.train_mask.nonzero().view(-1)
    for _ in range(STEPS):
        opt.zero_grad()
        h = model.encoder(graph.x, graph.schema.node_type(ids), graph.schema.type_index(ids))
        for i, conv in enumerate(model.layers):
            h = conv.to_pyg()(h, graph.edge_index(), graph.edge_type.to(torch.int64))
            h = torch.relu(h) if i < model.num_layers - 1 else h
        torch.nn.functional.cross_entropy(h[train], graph.y[train]).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _oracle_body(rank: int, world_size: int, part_dir: str, expected: dict[str, list[torch.Tensor]]) -> None:
    from graphdist.trainers.run import build_strategy

    for sync, params in expected.items():
        strategy = build_strategy(rank, world_size, _cfg(sync, "rgcn"), part_dir)
        for epoch in range(1, STEPS + 1):
            assert strategy.train_epoch(epoch).steps == 1
        for (name, p), q in zip(strategy.model.named_parameters(), params):
            torch.testing.assert_close(p.detach(), q, rtol=1e-4, atol=1e-5, msg=lambda m: f"--sync {sync}, {name}: {m}")
        strategy.close()


def test_two_workers_train_rgcn_like_one_process(tmp_path: Path) -> None:
    from partition.api import partition

    graph = typed_random_graph(90, seed=5)
    part_dir = partition(graph, 2, method="random", out=tmp_path / "parts", seed=0)
    expected = {sync: _one_process(graph, _cfg(sync, "rgcn")) for sync in ("ddp", "dwbp")}
    launch(_oracle_body, 2, str(part_dir), expected, timeout=120)


def test_a_typed_npz_trains_from_the_command_line_with_rgcn_and_resumes_bit_identically(tmp_path: Path) -> None:
    from graphdist.data.readers.typed_npz import save_typed_npz

    data = save_typed_npz(typed_random_graph(300, seed=1), tmp_path / "typed.npz")
    common = [sys.executable, "-m", "graphdist.cli.train", "--dataset", str(data), "--model", "rgcn"]

    def run(epochs: int, run_dir: str, *extra: str) -> str:
        out = subprocess.run([*common, "--epochs", str(epochs), "--run-dir", str(tmp_path / run_dir), *extra],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out.stdout

    whole = run(2, "whole", "--relation-fanouts", "cites=5,-1")
    assert "3 node types (paper 300, author 150, term 75*), 5 relations; * featureless, labels on paper" in whole
    run(1, "half", "--relation-fanouts", "cites=5,-1")
    resumed = run(2, "resumed", "--resume", str(tmp_path / "half"))

    def last_epoch(stdout: str) -> tuple[str, ...]:
        line = [row for row in stdout.splitlines() if row.startswith("epoch 2 done")][-1]
        return re.search(r"loss (\S+)", line).group(1), re.search(r"val (\S+)", line).group(1)

    assert last_epoch(resumed) == last_epoch(whole), (resumed, whole)
    # --predict: every node of every type, keyed by its type and its id within the type
    out = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--predict", str(tmp_path / "whole")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    import numpy as np

    pred = np.load(tmp_path / "whole" / "predictions.npz")
    assert pred["node_types"].tolist() == ["paper", "author", "term"]
    assert np.bincount(pred["node_type"]).tolist() == [300, 150, 75]
    papers = pred["node_type"] == 0
    assert sorted(pred["type_id"][papers].tolist()) == list(range(300)) and pred["pred"].shape == (525,)


@pytest.mark.parametrize("options, says", [
    ({"model": "rgcn"}, "--model rgcn needs a typed graph"),
    ({"relation_fanouts": "cites=1,1"}, "--relation-fanouts applies to typed graphs"),
])
def test_typed_options_on_an_untyped_graph_are_refused(options: dict, says: str) -> None:
    from graphdist.trainers.typed import check_typed_run

    with pytest.raises(ValueError, match=says):
        check_typed_run(TrainConfig(**options), {"dataset": "cora"})


@pytest.mark.parametrize("options, says", [
    ({"strategy": "fullgraph"}, "--strategy fullgraph is not built for typed graphs"),
    ({"sampler": "cluster"}, "--sampler cluster is not built for typed graphs"),
    ({"relation_fanouts": "likes=1,1"}, "unknown name 'likes'"),
])
def test_what_is_not_built_for_typed_graphs_is_refused(tmp_path: Path, options: dict, says: str) -> None:
    from partition.api import partition
    from partition.format import read_meta
    from graphdist.trainers.typed import check_typed_run

    meta = read_meta(partition(typed_random_graph(20), 1, method="random", out=tmp_path / "p"))
    with pytest.raises(ValueError, match=says):
        check_typed_run(TrainConfig(**options), meta)
