"""User models built from PyG layers train unchanged through ``graphdist.train``: GIN (``GINConv``).

The model is a module-level class of this file (spawned workers unpickle it by module path), written
as a user would, from the recipe in docs/models-and-tasks.md: ``conv(block.pair(x), block.edge_index, size=block.size)``.
It also defines ``num_layers`` and ``layer_forward``, so evaluation is exact layer-at-a-time inference and
``--strategy fullgraph`` can run it. The GAT counterpart is in ``test_train_e2e.py``.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import torch.nn.functional as F


class GIN(torch.nn.Module):
    """GIN (Xu et al., 2019): per layer ``MLP((1 + eps) * x_v + sum of x_u over v's neighbours``).

    Args:
        in_dim, hidden, out_dim: feature, hidden and class counts.
        num_layers: GIN layers, one block each (default 2).
        dropout: between layers (default 0.5).
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        from torch_geometric.nn import GINConv

        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(
            GINConv(torch.nn.Sequential(torch.nn.Linear(a, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, b)),
                    train_eps=True)
            for a, b in zip(dims, dims[1:])
        )
        self.num_layers = num_layers
        self.dropout = dropout

    def layer_forward(self, i: int, x: torch.Tensor, block) -> torch.Tensor:
        x = self.convs[i](block.pair(x), block.edge_index, size=block.size)
        if i < self.num_layers - 1:
            x = F.dropout(F.relu(x), self.dropout, self.training)
        return x

    def forward(self, x: torch.Tensor, blocks) -> torch.Tensor:  # blocks[0]: input layer; blocks[-1]: the seeds
        for i, block in enumerate(blocks):
            x = self.layer_forward(i, x, block)
        return x


@pytest.fixture(scope="module")
def cora_2(tmp_path_factory):
    from graphdist.data import load_graph
    from graphdist.testing.env import find_dataset
    from partition.api import partition

    return partition(load_graph(find_dataset("cora")), 2, method="metis", out=tmp_path_factory.mktemp("parts") / "c2")


def _train(parts, run_dir, **options):
    from graphdist.api import train

    with contextlib.redirect_stdout(io.StringIO()):  # the run's progress lines
        return train(GIN(1433, 32, 7), parts, num_workers=2, lr=0.01, seed=0, timeout=30, log_interval=1000,
                     run_dir=str(run_dir), **options)


def test_gin_trains_with_two_workers_on_cora(tmp_path, cora_2):
    # 5 epochs of 4 steps: best test accuracy 0.764 / 0.775 / 0.782 at seeds 0 / 1 / 2 (measured); chance is
    # 1/7, the majority class about 0.3.
    res = _train(cora_2, tmp_path / "run", epochs=5, fanouts=(10, 10), batch_size=35)
    losses = [r["loss"] for r in res.history]
    assert [r["epoch"] for r in res.history] == [1, 2, 3, 4, 5]
    assert losses[-1] < 0.5 * losses[0], losses
    assert res.best["test_acc"] > 0.6, res.best
    assert res.history[-1]["bytes_sent"].get("grad", 0) > 0  # the MLPs' gradients went through the sync


def test_gin_trains_full_graph(tmp_path, cora_2):
    # layer_forward makes it a full-graph model too: each epoch is one step over each part. Best test
    # accuracy 0.736 / 0.748 / 0.768 at seeds 0 / 1 / 2 (measured).
    res = _train(cora_2, tmp_path / "run", strategy="fullgraph", epochs=30, eval_every=10)
    losses = [r["loss"] for r in res.history]
    assert losses[-1] < 0.5 * losses[0], losses
    assert res.best["test_acc"] > 0.6, res.best
