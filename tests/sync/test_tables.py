"""Sparse embedding tables under every gradient sync: only looked-up rows travel, 2 ranks train as one process, and
a sharded optimizer state gathers to the one-process state."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from graphdist.sync.tables import TableExchange, sparse_table_names
from graphdist.testing import launch

STEPS = 4
ROWS = 30


class _Net(nn.Module):
    """A sparse table (marked row-wise, as TypedEncoder's) feeding a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(ROWS, 4, sparse=True)
        self.table.weight.row_wise = True
        self.head = nn.Linear(4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.table(ids)))


def _shares(step: int) -> list[int]:
    return [0, 5] if step == 0 else [3 + step, 6 - step]  # rank 0 has no samples at the first step


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(5)
    return [(torch.randint(0, ROWS, (sum(_shares(s)),), generator=gen), torch.randn(sum(_shares(s)), 3, generator=gen))
            for s in range(STEPS)]


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return out.sum() * 0.0 if out.shape[0] == 0 else nn.functional.mse_loss(out, y)


def _train(ranks: list[int], sync_for=None, shard=None):  # noqa: ANN202
    """STEPS steps of graphdist's Adam; ``ranks`` take their shares of each batch (one process: both)."""
    from graphdist.trainers.base import adam

    torch.manual_seed(3)
    net = _Net()
    sync = sync_for(net) if sync_for else None
    model = sync.model if sync else net
    opt = adam(net.parameters(), lr=0.05, shard=shard)
    for step, (ids, y) in enumerate(_data()):
        cut = [0, _shares(step)[0], len(ids)]
        rows = torch.cat([torch.arange(cut[r], cut[r + 1]) for r in ranks])
        opt.zero_grad()
        if sync:
            sync.begin_step(len(rows))
        _loss(model(ids[rows]), y[rows]).backward()
        if sync:
            sync.finish()
        opt.step()
    if sync:
        sync.close()
    return net, opt


def _body(rank: int, world_size: int, want: dict[str, torch.Tensor], want_opt: dict) -> None:
    from graphdist.sync import make_sync
    from graphdist.trainers.row_adam import RowShard

    for mode, sacp, shard in (("ddp", False, False), ("ddp", False, True), ("dwbp", False, True), ("dwbp", True, False),
                              ("blocking", False, True)):
        seen = {}

        def sync_for(net: nn.Module):  # noqa: ANN202
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sync = make_sync(mode, net, sacp=sacp)
            seen["sync"] = sync
            return sync

        net, opt = _train([rank], sync_for, RowShard(rank, world_size) if shard else None)
        sync = seen["sync"]
        if mode == "ddp":
            assert getattr(net.table.weight, "_ddp_ignored", False), "DDP must leave the table to the row exchange"
        else:
            assert all(p is not net.table.weight for layer in sync.layers for p in layer.params)
        for name, p in net.named_parameters():
            torch.testing.assert_close(p.detach(), want[name], rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"--sync {mode} (sacp {sacp}, shard {shard}), {name}: {m}")
        if shard:
            _check_sharded_state(rank, opt, net, want_opt)


def _check_sharded_state(rank: int, opt, net: nn.Module, want_opt: dict) -> None:
    """Each rank holds its half of the table's moments; rank 0 gathers the whole (a one-process run's), which
    a sharded optimizer loads back as its half; one rank's half is refused."""
    from graphdist.trainers.row_adam import RowAdam, RowShard

    table = net.table.weight
    lo, hi = RowShard(rank, 2).bounds(ROWS)
    assert opt.state[table]["exp_avg"].shape == (hi - lo, 4) and opt.state[table]["rows"] == (lo, hi)
    whole = opt.gathered_state_dict()
    assert (whole is None) == (rank != 0)
    if rank == 0:
        for index, entry in want_opt["state"].items():
            for key, value in entry.items():
                got = whole["state"][index][key]
                torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(value), rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"state {index} {key}: {m}")
        index = 2  # the table's: adam() puts the dense parameters (the head's two) first

        def table_only(state: dict) -> dict:
            return {"state": {0: state["state"][index]}, "param_groups": [{**state["param_groups"][1], "params": [0]}]}

        again = RowAdam([{"params": [table], "rows": True}], shard=RowShard(1, 2), lr=0.05)
        again.load_state_dict(table_only(whole))
        assert torch.equal(again.state[table]["exp_avg_sq"], whole["state"][index]["exp_avg_sq"][RowShard(1, 2).bounds(ROWS)[0]:])
        with pytest.raises(ValueError, match="one rank's share"):
            RowAdam([{"params": [table], "rows": True}], lr=0.05).load_state_dict(table_only(opt.state_dict()))


def test_two_ranks_with_a_sparse_table_train_as_one_process_under_every_sync() -> None:
    ref, opt = _train([0, 1])
    launch(_body, 2, {n: p.detach().clone() for n, p in ref.named_parameters()}, opt.state_dict(), timeout=120)


def _exchange_body(rank: int, world_size: int) -> None:
    emb = nn.Embedding(6, 2, sparse=True)
    ids = torch.tensor([1, 1, 4]) if rank == 0 else torch.tensor([4, 5])
    emb(ids).sum().backward()
    sent = TableExchange(emb).exchange(scale=0.5 if rank == 0 else 2.0)
    assert sent == (2 if rank == 0 else 2) * (8 + 4 * 2)  # this rank's distinct rows, to one peer
    grad = emb.weight.grad
    assert grad.is_sparse and grad.is_coalesced()
    assert grad.indices().tolist() == [[1, 4, 5]]
    # row 1: rank 0 twice x 0.5; row 4: rank 0 x 0.5 + rank 1 x 2.0; row 5: rank 1 x 2.0
    assert grad.values()[:, 0].tolist() == [1.0, 2.5, 2.0]
    # a rank without seeds (share 0) sends nothing, even a NaN its empty mean made
    emb.weight.grad = None
    (emb(ids) * (float("nan") if rank == 1 else 1.0)).sum().backward()
    TableExchange(emb).exchange(scale=1.0 if rank == 0 else 0.0)
    assert emb.weight.grad.coalesce().indices().tolist() == [[1, 4]]
    assert emb.weight.grad.coalesce().values()[:, 0].tolist() == [2.0, 1.0]


def test_the_exchange_sums_every_ranks_scaled_rows_and_sends_only_those() -> None:
    launch(_exchange_body, 2, timeout=60)


@pytest.mark.parametrize("sparse", [True, False])
def test_only_sparse_tables_are_named(sparse: bool) -> None:
    net = nn.Sequential(nn.Embedding(3, 2, sparse=sparse), nn.Linear(2, 2))
    assert sparse_table_names(net) == (["0.weight"] if sparse else [])
