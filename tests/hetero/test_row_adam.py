"""The lazy, row-wise Adam of typed graphs' embedding tables: touched rows move as Adam moves them, others not."""

from __future__ import annotations

import torch

from graphdist.trainers.base import adam
from graphdist.trainers.row_adam import RowAdam, mark_row_wise


def test_touched_rows_follow_adam_and_untouched_rows_and_moments_stay() -> None:
    torch.manual_seed(0)
    table = mark_row_wise(torch.nn.Parameter(torch.randn(6, 3)))
    dense = torch.nn.Parameter(torch.randn(3))
    opt = adam([dense, table], lr=0.05, weight_decay=0.01)
    assert isinstance(opt, RowAdam)
    # one row's trajectory against torch's Adam on that row alone
    row = torch.nn.Parameter(table.detach()[2].clone())
    ref = torch.optim.Adam([row], lr=0.05, weight_decay=0.01)
    before = table.detach().clone()
    for step in range(4):
        g = torch.zeros(6, 3)
        g[2] = torch.randn(3)
        if step % 2:
            g[4] = torch.randn(3)  # row 4: touched every other step, its own step count
        table.grad, dense.grad = g, torch.randn(3)
        row.grad = g[2].clone()
        opt.step()
        ref.step()
    torch.testing.assert_close(table.detach()[2], row.detach())
    untouched = [0, 1, 3, 5]
    assert torch.equal(table.detach()[untouched], before[untouched])
    assert opt.state[table]["row_step"].tolist() == [0, 0, 4, 0, 2, 0]
    assert not bool(opt.state[table]["exp_avg"][untouched].any())
    # checkpoints round-trip the row state
    again = adam([dense, table], lr=0.05, weight_decay=0.01)
    again.load_state_dict(opt.state_dict())
    assert again.state[table]["row_step"].tolist() == [0, 0, 4, 0, 2, 0]


def _table_model() -> torch.nn.Module:
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Embedding(8, 3, sparse=True), torch.nn.Linear(3, 2))
    mark_row_wise(net[0].weight)
    return net


def test_a_loss_scaler_unscales_the_rows_and_an_overflow_leaves_them() -> None:
    """torch's GradScaler hands a fused Adam the scale instead of unscaled gradients: the rows unscale too,
    and skip a step with an inf as the dense kernel does."""
    ids = torch.tensor([1, 5, 5])
    plain, scaled = _table_model(), _table_model()
    opt_plain, opt_scaled = adam(plain.parameters(), lr=0.1), adam(scaled.parameters(), lr=0.1)
    assert opt_scaled.defaults["fused"] and opt_scaled._step_supports_amp_scaling
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(3):
        opt_plain.zero_grad(), opt_scaled.zero_grad()
        plain(ids).sum().backward()
        opt_plain.step()
        scaler.scale(scaled(ids).sum()).backward()
        scaler.step(opt_scaled)
        scaler.update()
    for a, b in zip(plain.parameters(), scaled.parameters()):
        torch.testing.assert_close(a, b)
    before = scaled[0].weight.detach().clone()
    opt_scaled.zero_grad()
    scaler.scale(scaled(ids).sum() * float("inf")).backward()
    scaler.step(opt_scaled)
    assert torch.equal(scaled[0].weight.detach(), before)


def test_a_probe_copy_keeps_its_tables_row_wise() -> None:
    from graphdist.trainers.probes import probe_copy

    copy = probe_copy(_table_model())
    copy[0](torch.tensor([2])).sum().backward()
    assert isinstance(adam(copy.parameters(), lr=0.1), RowAdam)  # torch's Adam would refuse the sparse gradient
