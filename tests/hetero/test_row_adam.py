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
