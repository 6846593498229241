"""Full-graph strategy: N workers with an exact halo exchange == one process on the whole graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, random_graph

MODELS = ("gcn", "sage", "gat")


def _graph():
    graph = random_graph(100, avg_degree=4, seed=21, feature_dim=6)
    graph.x = torch.randn(graph.num_nodes, 6, generator=torch.Generator().manual_seed(2))
    return graph


def _cfg(model: str, world_size: int, staleness: int = 0, sync: str = "dwbp") -> TrainConfig:
    return TrainConfig(strategy="fullgraph", model=model, hidden=8, layers=3, dropout=0.0,
                       heads=2, lr=0.01, staleness=staleness, sync=sync, num_workers=world_size, seed=4, timeout=20)


def _reference(graph, cfg: TrainConfig) -> dict[str, object]:
    """One process: logits of every node, the mean train loss and its parameter gradients."""
    from graphdist.models import build_model, gcn_norm_block
    from sampling.base import Block

    torch.manual_seed(cfg.seed)
    extra = {"heads": cfg.heads} if cfg.model == "gat" else {}
    model = build_model(cfg.model, graph.num_features, cfg.hidden, graph.num_classes, cfg.layers,
                        dropout=cfg.dropout, **extra)
    n = graph.num_nodes
    block = Block(src=graph.indices.to(torch.int64), dst=graph.dst_of_edges(), num_src=n, num_dst=n,
                  indptr=graph.indptr)
    if getattr(model, "needs_global_degrees", False):
        block = gcn_norm_block(block, graph.degrees())
    h = graph.x
    for i in range(model.num_layers):
        h = model.layer_forward(i, h, block)
    train = graph.train_mask.nonzero().view(-1)
    loss = torch.nn.functional.cross_entropy(h[train], graph.y[train])
    loss.backward()
    return {"logits": h.detach(), "loss": float(loss), "grads": [p.grad.clone() for p in model.parameters()]}


def _exact_body(rank: int, world_size: int, part_dir: str, expected: dict[str, dict[str, object]],
                boundary: list[int], halo: list[int]) -> None:
    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    for model, ref in expected.items():
        strategy = build_strategy(rank, world_size, _cfg(model, world_size), part_dir)
        part = strategy.partition
        orig = part.orig_ids.index_select(0, part.global_ids[: part.num_inner])
        with torch.no_grad():
            logits = strategy.net()
        torch.testing.assert_close(logits, ref["logits"].index_select(0, orig), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{model} logits on rank {rank}: {m}")
        assert strategy.halo.boundary_rows == boundary[rank], (strategy.halo.boundary_rows, boundary)
        comm.reset_byte_counts()
        stats = strategy.train_epoch(1)
        # Halo bytes: layers 1 and 2 exchange hidden rows, forward and backward; the input
        # features were fetched once, at set-up.
        # Forward: the boundary rows others read; backward: the gradients of this part's halo rows.
        width = 8 * (2 if model == "gat" else 1)
        sent = comm.byte_counts().get("halo", 0)
        assert sent == 2 * (boundary[rank] + halo[rank]) * width * 4, (model, rank, sent, boundary[rank], halo[rank])
        loss = comm.all_reduce(torch.tensor([stats.loss_sum / strategy.num_train_total]), tag="test").item()
        assert loss == pytest.approx(ref["loss"], rel=1e-5), (model, loss, ref["loss"])
        for (name, p), g in zip(strategy.model.named_parameters(), ref["grads"]):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6, msg=lambda m: f"{model} grad {name}: {m}")
        strategy.close()


def _boundary_rows(graph, part_dir: Path, world_size: int) -> tuple[list[int], list[int]]:
    """Per part: rows it sends (its nodes another part reads, once per reading part) and rows it receives."""
    node_map = np.load(part_dir / "node_map.npy")
    orig = np.load(part_dir / "orig_ids.npy")
    part_of = node_map[np.argsort(orig)]  # by original id
    src, dst = graph.indices.numpy(), graph.dst_of_edges().numpy()
    pairs = {(int(s), int(part_of[d])) for s, d in zip(src, dst) if part_of[s] != part_of[d]}
    sends = [sum(1 for s, q in pairs if part_of[s] == p) for p in range(world_size)]
    receives = [sum(1 for s, q in pairs if q == p) for p in range(world_size)]
    return sends, receives


@pytest.mark.parametrize("world_size", [2, 4])
def test_exact_fullgraph_equals_one_process(tmp_path, world_size):
    from partition.api import partition

    graph = _graph()
    part_dir = Path(partition(graph, world_size, method="metis", out=tmp_path / "parts", seed=0))
    expected = {m: _reference(graph, _cfg(m, world_size)) for m in MODELS}
    boundary, halo = _boundary_rows(graph, part_dir, world_size)
    assert sum(boundary) == sum(halo) > 0
    launch(_exact_body, world_size, str(part_dir), expected, boundary, halo, timeout=150)


def _stale_body(rank: int, world_size: int, part_dir: str, ref: dict[str, object]) -> None:
    from dataclasses import replace

    from graphdist.trainers.run import build_strategy

    # Frozen weights: embeddings do not change between steps, so stale halo rows and stale halo
    # gradients equal fresh ones, and every step's gradients equal the exact ones (with smoothing too).
    for smoothing in (0.0, 0.5):
        strategy = build_strategy(rank, world_size, replace(_cfg("sage", world_size, staleness=1), smoothing=smoothing),
                                  part_dir)
        for group in strategy.optimizer.param_groups:
            group["lr"] = 0.0
        for epoch in range(1, 4):
            strategy.train_epoch(epoch)
            for (name, p), g in zip(strategy.model.named_parameters(), ref["grads"]):
                torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6,
                                           msg=lambda m: f"step {epoch}, smoothing {smoothing}, {name}: {m}")
            # Wait-free: each exchanged layer's forward and backward exchanges are still in flight
            # when the step returns (from the second step on; the first is exact).
            pending = [s.forward_pending is not None and s.backward_pending is not None
                       for s in strategy.halo._stale.values()]
            assert pending == ([False, False] if epoch == 1 else [True, True]), (epoch, pending)
        strategy.close()
    # Learning weights: the stale run starts like the exact one, then departs from it, and learns.
    losses = {}
    for staleness in (0, 1):
        strategy = build_strategy(rank, world_size, _cfg("sage", world_size, staleness=staleness), part_dir)
        losses[staleness] = [strategy.train_epoch(e).loss_sum for e in range(1, 7)]
        strategy.close()
    assert losses[0][0] == pytest.approx(losses[1][0], rel=1e-6)
    assert losses[0][-1] != pytest.approx(losses[1][-1], rel=1e-6)


def test_stale_exchange_is_wait_free_and_exact_when_weights_do_not_move(tmp_path):
    from partition.api import partition

    graph = _graph()
    part_dir = partition(graph, 2, method="metis", out=tmp_path / "parts", seed=0)
    launch(_stale_body, 2, str(part_dir), _reference(graph, _cfg("sage", 2)), timeout=150)


def test_stale_resume_is_bit_identical(tmp_path):
    from graphdist.api import train
    from partition.api import partition

    part_dir = partition(_graph(), 2, method="metis", out=tmp_path / "parts", seed=0)
    common = dict(strategy="fullgraph", staleness=1, smoothing=0.3, hidden=8, layers=3,
                  dropout=0.2, lr=0.01, num_workers=2, timeout=30, eval_every=0)
    whole = train(None, part_dir, epochs=6, run_dir=str(tmp_path / "whole"), **common)
    train(None, part_dir, epochs=3, run_dir=str(tmp_path / "half"), **common)
    resumed = train(None, part_dir, epochs=6, resume=str(tmp_path / "half"), **common)
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history]
    a = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "half" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_profiled_placement_records_the_halo_plan_and_leaves_training_unchanged(tmp_path):
    """``--placement profiled`` probes exact steps for the simulator (profile.json) on a model copy:
    the run it precedes trains exactly as without it (dropout draws included)."""
    import json

    from graphdist.api import train
    from partition.api import partition

    graph = _graph()
    part_dir = partition(graph, 2, method="metis", out=tmp_path / "parts", seed=0)
    common = dict(strategy="fullgraph", staleness=1, hidden=8, layers=3, dropout=0.2,
                  lr=0.01, num_workers=2, timeout=30, eval_every=0, epochs=2)
    profiled = train(None, part_dir, placement="profiled", run_dir=str(tmp_path / "profiled"), **common)
    plain = train(None, part_dir, placement="equal", run_dir=str(tmp_path / "plain"), **common)
    assert [r["loss"] for r in profiled.history] == [r["loss"] for r in plain.history]
    a = torch.load(tmp_path / "profiled" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "plain" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "plain" / "profile.json").exists()

    probes = json.loads((tmp_path / "profiled" / "profile.json").read_text())["fullgraph"]
    sends, _ = _boundary_rows(graph, Path(part_dir), 2)
    for rank, m in enumerate(probes):
        assert sum(r for peer, r in enumerate(m["send_rows"]) if peer != rank) == sends[rank], (m, sends)
        assert m["widths"] == [8, 8] and m["compute_s"] > 0 and m["inner"] > 0
        assert [n for n, _, _ in m["linears"]] and m["param_bytes"] > 0

    from placement.profiled import fullgraph_costs_from_profile
    from placement.simulator import Layout, simulate_fullgraph

    workers, shape = fullgraph_costs_from_profile({"fullgraph": probes})
    here = simulate_fullgraph(workers, Layout.one_host(2), shape)
    slow = simulate_fullgraph(workers, Layout.hosts_of([1, 1], link_bps=1e6), shape)
    assert slow.epoch_s > here.epoch_s > 0 and slow.bottleneck == "network"


def test_refusals_come_before_any_worker_starts(tmp_path):
    import subprocess
    import sys

    from graphdist.api import train
    from graphdist.testing.models import PygGAT
    from partition.api import partition

    part_dir = partition(_graph(), 2, method="metis", out=tmp_path / "parts", seed=0)
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--partitions", str(part_dir),
                           "--strategy", "fullgraph", "--num-workers", "2", "--max-memory", "0.00001",
                           "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "part 0 needs about" in done.stderr and "--max-memory 0.00 GiB; partition into more parts" in done.stderr
    assert "[rank" not in done.stdout  # no worker ran
    with pytest.raises(ValueError, match="fullgraph runs the model layer by layer, with a halo exchange between layers: PygGAT needs num_layers"):
        train(PygGAT(6, 4, 3, heads=1), part_dir, strategy="fullgraph", num_workers=2, epochs=1,
              run_dir=str(tmp_path / "run2"))
    # No wall-clock bound here: on a loaded 16-core GPU machine the two refusals took 69 s of
    # imports. That no worker ran is what the test is about, and the outputs say it.
    assert not (tmp_path / "run2" / "metrics.jsonl").exists()


def _bns_body(rank: int, world_size: int, part_dir: str, expected_bytes: dict[int, list[int]]) -> None:
    from dataclasses import replace

    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    strategy = build_strategy(rank, world_size, replace(_cfg("sage", world_size), boundary_sample=0.5, lr=0.05),
                              part_dir)
    losses = []
    for epoch in range(1, 9):
        comm.reset_byte_counts()
        stats = strategy.train_epoch(epoch)
        losses.append(comm.all_reduce(torch.tensor([stats.loss_sum]), tag="test").item())
        if epoch in expected_bytes:
            # Only the kept boundary rows travel, both ways, on the two exchanged layers.
            assert comm.byte_counts().get("halo", 0) == expected_bytes[epoch][rank], (epoch, comm.byte_counts())
    assert losses[-1] < losses[0], losses
    strategy.close()


def test_boundary_sampling_sends_only_the_kept_rows_and_learns(tmp_path):
    from graphdist.sync.halo import keep_boundary
    from partition.api import partition

    graph = _graph()
    part_dir = Path(partition(graph, 2, method="metis", out=tmp_path / "parts", seed=0))
    node_map = np.load(part_dir / "node_map.npy")
    new_of = np.argsort(np.load(part_dir / "orig_ids.npy"))  # original id -> new id
    part_of = node_map[new_of]
    src, dst = graph.indices.numpy(), graph.dst_of_edges().numpy()
    pairs = {(int(s), int(part_of[d])) for s, d in zip(src, dst) if part_of[s] != part_of[d]}
    expected = {}
    for epoch in (1, 2):
        kept = keep_boundary(torch.from_numpy(new_of), epoch, seed=4, p=0.5, num_nodes=graph.num_nodes).numpy()
        rows = [sum(1 for s, q in pairs if kept[s] and (part_of[s] == p or q == p)) for p in range(2)]
        expected[epoch] = [2 * r * 8 * 4 for r in rows]
        assert 0 < sum(rows) < 2 * len(pairs)
    launch(_bns_body, 2, str(part_dir), expected, timeout=120)


def _compressed_body(rank: int, world_size: int, part_dir: str, ref: dict[str, object], boundary: list[int],
                     halo: list[int]) -> None:
    from dataclasses import replace

    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    strategy = build_strategy(rank, world_size, replace(_cfg("gcn", world_size), compress="bf16"), part_dir)
    comm.reset_byte_counts()
    stats = strategy.train_epoch(1)
    # Half the exact exchange's bytes: the hidden rows and their gradients travel as bfloat16.
    assert comm.byte_counts().get("halo", 0) == 2 * (boundary[rank] + halo[rank]) * 8 * 2
    loss = comm.all_reduce(torch.tensor([stats.loss_sum / strategy.num_train_total]), tag="test").item()
    assert loss == pytest.approx(ref["loss"], rel=1e-2) and loss != pytest.approx(ref["loss"], rel=1e-7)
    for (name, p), g in zip(strategy.model.named_parameters(), ref["grads"]):
        torch.testing.assert_close(p.grad, g, rtol=0.0, atol=2e-2 * float(g.abs().max()), msg=lambda m: f"{name}: {m}")
    strategy.close()


def test_compressed_halo_sends_half_the_bytes_and_stays_close_to_exact(tmp_path):
    from partition.api import partition

    graph = _graph()
    part_dir = Path(partition(graph, 2, method="metis", out=tmp_path / "parts", seed=0))
    boundary, halo = _boundary_rows(graph, part_dir, 2)
    launch(_compressed_body, 2, str(part_dir), _reference(graph, _cfg("gcn", 2)), boundary, halo, timeout=60)
