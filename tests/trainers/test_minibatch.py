"""The minibatch strategy against single-process oracles."""

from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, random_graph
from graphdist.trainers.features import normalize_features

STEPS = 3


def _full_block(graph):
    from sampling.base import Block

    n = graph.num_nodes
    return Block(src=graph.indices.to(torch.int64), dst=graph.dst_of_edges(), num_src=n, num_dst=n,
                 indptr=graph.indptr)


def _reference_model(graph, cfg: TrainConfig):
    from graphdist.models import build_model

    torch.manual_seed(cfg.seed)
    return build_model(cfg.model, graph.num_features, cfg.hidden, graph.num_classes, cfg.layers, dropout=cfg.dropout)


def _full_graph_forward(model, graph):
    """The model layer by layer on the whole graph (GCN normalised by global degrees)."""
    from graphdist.models import gcn_norm_block

    block = _full_block(graph)
    if getattr(model, "needs_global_degrees", False):
        block = gcn_norm_block(block, graph.degrees())
    h = graph.x
    for i in range(model.num_layers):
        h = model.layer_forward(i, h, block)
    return h


def _full_graph_outputs(graph, cfg: TrainConfig) -> torch.Tensor:
    model = _reference_model(graph, cfg)
    model.eval()
    with torch.no_grad():
        return _full_graph_forward(model, graph)


def _strategy(rank, world_size, cfg, part_dir):
    from graphdist.trainers.run import build_strategy

    return build_strategy(rank, world_size, cfg, part_dir)


def _distributed_inference_body(rank: int, world_size: int, part_dir: str, cfg: TrainConfig, expected: torch.Tensor):
    strategy = _strategy(rank, world_size, cfg, part_dir)
    out = strategy._exact()
    part = strategy.partition
    orig = torch.as_tensor(part.orig_ids).to(torch.int64).index_select(0, part.global_ids[: part.num_inner])
    torch.testing.assert_close(out, expected.index_select(0, orig), rtol=1e-4, atol=1e-4)
    # predict() returns the same logits keyed by original id.
    pred = strategy.predict()
    assert torch.equal(pred.orig_ids, orig)
    torch.testing.assert_close(pred.logits, out)
    strategy.close()


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_distributed_exact_inference_equals_full_graph(tmp_path, model):
    from partition.api import partition

    graph = random_graph(90, avg_degree=5, seed=4, feature_dim=6)
    graph.x = torch.randn(graph.num_nodes, 6, generator=torch.Generator().manual_seed(0))
    part_dir = partition(graph, 2, method="random", out=Path(tmp_path) / "parts", seed=0)
    cfg = TrainConfig(model=model, hidden=8, layers=2, fanouts=(3, 3), prefetch=False, seed=5)
    expected = _full_graph_outputs(graph, cfg)
    launch(_distributed_inference_body, 2, str(part_dir), cfg, expected, timeout=90)


# ----------------------------------------------- N workers == one process


def _oracle_graph():
    graph = random_graph(120, avg_degree=4, seed=11, feature_dim=5)
    graph.x = torch.randn(graph.num_nodes, 5, generator=torch.Generator().manual_seed(1))
    return graph


def _oracle_cfg(sync: str, world_size: int, allreduce: str = "ring") -> TrainConfig:
    # Full fan-out, one batch of every train node per step, no dropout: the distributed step
    # computes the same loss as one process on the whole graph.
    return TrainConfig(model="sage", hidden=8, layers=2, fanouts=(-1, -1), dropout=0.0, batch_size=10_000,
                       lr=0.05, sync=sync, epochs=STEPS, num_workers=world_size, prefetch=False, seed=3,
                       timeout=20, allreduce=allreduce)


def _one_process_params(graph, cfg: TrainConfig) -> list[torch.Tensor]:
    """Plain torch: full-graph forward, cross-entropy over every train node, Adam, STEPS times."""
    model = _reference_model(graph, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train = graph.train_mask.nonzero().view(-1)
    for _ in range(STEPS):
        opt.zero_grad()
        out = _full_graph_forward(model, graph)
        torch.nn.functional.cross_entropy(out[train], graph.y[train]).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _oracle_body(rank: int, world_size: int, part_dir: str, expected: dict[str, list[torch.Tensor]]):
    import os

    runs = [(sync, "ring") for sync in expected]
    if world_size == 4:  # two emulated hosts: the topology-aware algorithms have something to do
        os.environ["GRAPHDIST_TOPOLOGY"] = "2x2"
        runs += [("dwbp", "hd"), ("dwbp", "hier"), ("blocking", "auto")]
    for sync, allreduce in runs:
        params = expected[sync]
        strategy = _strategy(rank, world_size, _oracle_cfg(sync, world_size, allreduce), part_dir)
        for epoch in range(1, STEPS + 1):
            stats = strategy.train_epoch(epoch)
            assert stats.steps == 1, stats
        model = strategy.model
        for (name, p), q in zip(model.named_parameters(), params):
            torch.testing.assert_close(p.detach(), q, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"{world_size} workers, --sync {sync} --allreduce {allreduce}, "
                                                     f"{name}: {m}")
        strategy.close()


@pytest.mark.parametrize("world_size", [2, 4])
def test_n_workers_train_like_one_process(tmp_path, world_size):
    from partition.api import partition

    graph = _oracle_graph()
    part_dir = partition(graph, world_size, method="random", out=Path(tmp_path) / "parts", seed=0)
    expected = {sync: _one_process_params(graph, _oracle_cfg(sync, world_size)) for sync in ("dwbp", "blocking", "ddp")}
    # The oracle can fail: the first step alone already moves every parameter.
    start = [p.detach() for p in _reference_model(graph, _oracle_cfg("dwbp", world_size)).parameters()]
    assert all((a - b).abs().max() > 1e-3 for a, b in zip(expected["dwbp"], start))
    launch(_oracle_body, world_size, str(part_dir), expected, timeout=120)


def test_row_normalisation():
    x = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])
    assert normalize_features(x, "row").tolist() == [[0.25, 0.75], [0.0, 0.0], [0.5, 0.5]]
    assert normalize_features(x, "none") is x
    # Signed rows (generated graphs) by their L1 norm: a plain sum near 0 blew them up 1e12-fold.
    signed = normalize_features(torch.tensor([[1.0, -1.0 + 1e-9, 2.0], [-1.0, -3.0, 0.0]]), "row")
    assert torch.allclose(signed, torch.tensor([[0.25, -0.25, 0.5], [-0.25, -0.75, 0.0]]))
    with pytest.raises(ValueError, match="--feature-norm must be one of none, row"):
        normalize_features(x, "l2")


def test_each_train_seed_trains_exactly_once_per_epoch_over_all_workers(tmp_path):
    """Parts with uneven train counts: the short worker ends its epoch in empty steps instead of
    repeating seeds (which the old padding did), and no worker skips one."""
    import json
    import math

    from graphdist.cli.train import main
    from graphdist.data import load_graph
    from partition.api import partition, read_meta

    parts = partition(load_graph("synthetic-1500"), 2, method="metis", out=tmp_path / "parts", seed=0)
    counts = [p["num_train"] for p in read_meta(parts)["parts"]]
    total = sum(counts)

    def pads(batch: int) -> bool:  # some worker has fewer batches of seeds than the steps all run
        steps = math.ceil(total / batch)
        return any(math.ceil(n / math.ceil(n / steps)) < steps for n in counts)

    batch = next(b for b in range(8, total) if pads(b))
    run = tmp_path / "run"
    assert main(["--partitions", str(parts), "--num-workers", "2", "--epochs", "1", "--batch-size", str(batch),
                 "--hidden", "8", "--fanouts", "3,3", "--eval-every", "0", "--log-interval", "100000",
                 "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["seeds"] for r in records] == [total], (counts, batch)


def test_four_parts_on_two_workers_train_like_one_process(tmp_path):
    """Each worker trains on the union of two parts (``partition.merge``): the same parameters as one
    process on the whole graph, so a partitioning into more parts serves a smaller cluster."""
    from graphdist.trainers.run import plan_job
    from partition.api import partition

    graph = _oracle_graph()
    part_dir = partition(graph, 4, method="metis", out=Path(tmp_path) / "parts", seed=0)
    plan = plan_job(str(part_dir), _oracle_cfg("dwbp", 2), 2)
    assert sorted(len(r.parts) for r in plan.ranks) == [2, 2], plan.describe()
    expected = {"dwbp": _one_process_params(graph, _oracle_cfg("dwbp", 2))}
    launch(_oracle_body, 2, str(part_dir), expected, timeout=120)
