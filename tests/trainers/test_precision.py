"""--precision bf16: every sampled strategy's steps run their products in bfloat16, deterministically; the
parameters, their gradients and the optimizer stay float32; a CPU without bf16 instructions refuses it.
--precision fp16: the loss is scaled and every strategy's step undoes the scale exactly; a CPU refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.models import dense
from graphdist.testing import launch
from graphdist.testing.env import require
from graphdist.trainers.precision import autocast, check_precision


def test_the_flag_is_validated_and_an_emulating_cpu_refuses_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="--precision must be one of fp32, bf16, fp16"):
        TrainConfig(precision="fp8")
    monkeypatch.delenv("GRAPHDIST_TEST_EMULATED_FP16", raising=False)
    with pytest.raises(ValueError, match="--precision fp16 is for GPUs.*use --precision bf16"):
        check_precision("fp16", torch.device("cpu"))
    monkeypatch.setattr(dense, "native_bf16", lambda: False)
    with pytest.raises(ValueError, match="no bfloat16 instructions.*use --precision fp32"):
        check_precision("bf16", torch.device("cpu"))
    check_precision("fp32", torch.device("cpu"))
    with autocast("fp32", torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")


def _graph():
    from graphdist.data.synthetic import synthetic

    return synthetic(1200, num_features=256, num_classes=4, seed=3)


def _body(rank: int, world_size: int, part_dir: str) -> None:
    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    for strategy_name in ("aggregation", "minibatch"):
        losses = {}
        for precision in ("fp32", "bf16", "bf16"):
            # 128 seeds a step: the first layer's product is ~1,000 rows x 256 x 64, above MIN_MACS.
            cfg = TrainConfig(strategy=strategy_name, model="gcn", hidden=64, layers=2, fanouts=(5, 5),
                              batch_size=256, lr=0.01, num_workers=2, prefetch=False, seed=1, timeout=20,
                              precision=precision, max_steps=3)
            strategy = build_strategy(rank, world_size, cfg, part_dir)
            stats = strategy.train_epoch(1)
            assert all(p.dtype == torch.float32 for p in strategy.model.parameters())
            state = strategy.optimizer.state_dict()["state"]
            assert all(t.dtype == torch.float32 for s in state.values() for t in s.values() if t.dim())
            losses.setdefault(precision, []).append(stats.step_losses)
            strategy.close()
        fp32, (bf16, again) = losses["fp32"][0], losses["bf16"]
        assert bf16 == again, (strategy_name, bf16, again)  # deterministic: resume stays bit-identical
        assert bf16 != fp32 and bf16 == pytest.approx(fp32, rel=0.02), (strategy_name, bf16, fp32)
        comm.barrier()
    # Batches of 8 seeds a rank: the first layer's rows are few enough for sufficient factors (SACP,
    # --sacp auto under --sync dwbp). Its check of the factors against autograd's bf16 gradient must pass, and the
    # ranks must apply the same gradients.
    cfg = TrainConfig(strategy="minibatch", model="sage", hidden=64, layers=2, fanouts=(3, 3), batch_size=16,
                      lr=0.01, num_workers=2, prefetch=False, seed=1, timeout=20, precision="bf16", max_steps=4,
                      sync="dwbp")
    strategy = build_strategy(rank, world_size, cfg, part_dir)
    strategy.train_epoch(1)
    assert "sfb" in strategy.sync.hook_state.choices.values(), strategy.sync.hook_state.choices
    params = comm.all_gather_object([p.detach().clone() for p in strategy.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(params[0], params[1]))
    strategy.close()


def test_sampled_strategies_train_in_bf16_deterministically_close_to_fp32(tmp_path: Path) -> None:
    require(dense.native_bf16(), "this CPU has no bfloat16 instructions (AVX512_BF16 or AMX)")
    from partition.api import partition

    part_dir = partition(_graph(), 2, method="random", out=tmp_path / "parts", seed=0)
    launch(_body, 2, str(part_dir), timeout=120)


def test_bf16_resume_is_bit_identical(tmp_path: Path) -> None:
    require(dense.native_bf16(), "this CPU has no bfloat16 instructions (AVX512_BF16 or AMX)")
    from graphdist.api import train
    from partition.api import partition

    part_dir = partition(_graph(), 2, method="metis", out=tmp_path / "parts", seed=0)
    common = dict(strategy="minibatch", hidden=64, fanouts=(5, 5), batch_size=256, max_steps=3,
                  precision="bf16", num_workers=2, timeout=30, eval_every=2)
    whole = train(None, part_dir, epochs=4, run_dir=str(tmp_path / "whole"), **common)
    train(None, part_dir, epochs=2, run_dir=str(tmp_path / "half"), **common)
    resumed = train(None, part_dir, epochs=4, resume=str(tmp_path / "half"), **common)
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history], (resumed.history, whole.history)
    assert resumed.history[-1]["test_acc"] == whole.history[-1]["test_acc"]


def _fp16_body(rank: int, world_size: int, part_dirs: dict) -> None:
    """On a CPU the fp16 products run in float32 (emulation allowed for this test), so what is left of
    fp16 is the loss scale: 2^16 up before backward, the same down before the optimizer, exact in
    float32. Every strategy must then train bit for bit as in fp32: a scale left on the gradients
    (or taken off twice) changes Adam's steps through its epsilon and the weight decay."""
    import os

    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    os.environ["GRAPHDIST_TEST_EMULATED_FP16"] = "1"
    runs = (("minibatch", {}), ("aggregation", {"correction_steps": 1, "avg_every": 2}),
            ("fullgraph", {"fanouts": (-1, -1)}))
    for strategy_name, extra in runs:
        losses, params = {}, {}
        for precision in ("fp32", "fp16"):
            cfg = TrainConfig(**{**dict(strategy=strategy_name, model="gcn", hidden=32, layers=2, fanouts=(5, 5),
                                        batch_size=128, lr=0.01, weight_decay=5e-4, num_workers=2, prefetch=False,
                                        seed=1, timeout=20, precision=precision, max_steps=3), **extra})
            strategy = build_strategy(rank, world_size, cfg, part_dirs[strategy_name])
            assert strategy.scalers["train"].is_enabled() == (precision == "fp16")
            losses[precision] = strategy.train_epoch(1).step_losses + strategy.train_epoch(2).step_losses
            params[precision] = [p.detach().clone() for p in strategy.model.parameters()]
            if precision == "fp16":
                assert strategy.scalers["train"].get_scale() == 2.0 ** 16  # no step overflowed
            strategy.close()
        assert losses["fp16"] == losses["fp32"], (strategy_name, losses)
        assert all(torch.equal(a, b) for a, b in zip(params["fp16"], params["fp32"])), strategy_name
        comm.barrier()
    # A step whose scaled gradients are not finite (its loss times infinity): both ranks skip it (the
    # parameters stay as broadcast, equal everywhere), halve the scale alike, then train on.
    class Poisoned(torch.amp.GradScaler):
        calls = 0

        def scale(self, loss):  # noqa: ANN001, ANN201
            Poisoned.calls += 1
            return super().scale(loss) * (float("inf") if Poisoned.calls == 1 else 1.0)

    cfg = TrainConfig(strategy="minibatch", model="gcn", hidden=32, layers=2, fanouts=(5, 5), batch_size=128,
                      lr=0.01, num_workers=2, prefetch=False, seed=1, timeout=20, precision="fp16", max_steps=1)
    strategy = build_strategy(rank, world_size, cfg, part_dirs["minibatch"])
    strategy.scalers["train"] = Poisoned("cpu")
    before = [p.detach().clone() for p in strategy.model.parameters()]
    strategy.train_epoch(1)
    assert all(torch.equal(a, b) for a, b in zip(strategy.model.parameters(), before))  # skipped
    assert strategy.scalers["train"].get_scale() == 2.0 ** 15
    strategy.train_epoch(2)
    after = comm.all_gather_object([p.detach().clone() for p in strategy.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(after[0], after[1]))
    assert not all(torch.equal(a, b) for a, b in zip(after[0], before))  # the next step stepped
    strategy.close()


def test_fp16_loss_scaling_is_undone_exactly_by_every_strategy(tmp_path: Path) -> None:
    from partition.api import partition

    graph = _graph()
    parts = {"minibatch": partition(graph, 2, method="metis", out=tmp_path / "metis", seed=0),
             "aggregation": partition(graph, 2, method="random", out=tmp_path / "random", seed=0)}
    parts["fullgraph"] = parts["minibatch"]
    launch(_fp16_body, 2, {k: str(v) for k, v in parts.items()}, timeout=180)


def test_fp16_resume_restores_the_loss_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphdist.api import train
    from graphdist.checkpoint import load_checkpoint
    from partition.api import partition

    monkeypatch.setenv("GRAPHDIST_TEST_EMULATED_FP16", "1")
    part_dir = partition(_graph(), 2, method="metis", out=tmp_path / "parts", seed=0)
    common = dict(strategy="minibatch", hidden=32, fanouts=(5, 5), batch_size=256, max_steps=3,
                  precision="fp16", num_workers=2, timeout=30, eval_every=2)
    whole = train(None, part_dir, epochs=4, run_dir=str(tmp_path / "whole"), **common)
    train(None, part_dir, epochs=2, run_dir=str(tmp_path / "half"), **common)
    ranks = load_checkpoint(tmp_path / "half")["extra"]["ranks"]
    assert [r["scalers"]["train"]["scale"] for r in ranks] == [2.0 ** 16] * 2
    resumed = train(None, part_dir, epochs=4, resume=str(tmp_path / "half"), **common)
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history]
