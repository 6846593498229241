"""Sparse embedding tables under every gradient sync: only looked-up rows travel, and 2 ranks train as one process."""

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


def _train(ranks: list[int], sync_for=None) -> _Net:
    """STEPS steps of graphdist's Adam; ``ranks`` take their shares of each batch (one process: both)."""
    from graphdist.trainers.base import adam

    torch.manual_seed(3)
    net = _Net()
    sync = sync_for(net) if sync_for else None
    model = sync.model if sync else net
    opt = adam(net.parameters(), lr=0.05)
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
    return net


def _body(rank: int, world_size: int, want: dict[str, torch.Tensor]) -> None:
    from graphdist.sync import make_sync

    for mode, sacp in (("ddp", False), ("dwbp", False), ("dwbp", True), ("blocking", False)):
        seen = {}

        def sync_for(net: nn.Module):  # noqa: ANN202
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sync = make_sync(mode, net, sacp=sacp)
            seen["sync"] = sync
            return sync

        net = _train([rank], sync_for)
        sync = seen["sync"]
        if mode == "ddp":
            assert getattr(net.table.weight, "_ddp_ignored", False), "DDP must leave the table to the row exchange"
        else:
            assert all(p is not net.table.weight for layer in sync.layers for p in layer.params)
        for name, p in net.named_parameters():
            torch.testing.assert_close(p.detach(), want[name], rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"--sync {mode} (sacp {sacp}), {name}: {m}")


def test_two_ranks_with_a_sparse_table_train_as_one_process_under_every_sync() -> None:
    ref = _train([0, 1])
    launch(_body, 2, {n: p.detach().clone() for n, p in ref.named_parameters()}, timeout=120)


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


def test_the_exchange_sums_every_ranks_scaled_rows_and_sends_only_those() -> None:
    launch(_exchange_body, 2, timeout=60)


@pytest.mark.parametrize("sparse", [True, False])
def test_only_sparse_tables_are_named(sparse: bool) -> None:
    net = nn.Sequential(nn.Embedding(3, 2, sparse=sparse), nn.Linear(2, 2))
    assert sparse_table_names(net) == (["0.weight"] if sparse else [])
