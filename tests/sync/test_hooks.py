"""Communication hooks: the Bucket a hook sees, seed weights, wrappers, and registration on torch DDP."""

from __future__ import annotations

import torch
from torch import nn

from graphdist.sync.hooks import AllreduceState, Bucket, SeedWeights, seed_weighted_allreduce
from graphdist.testing import launch, one_rank_group


def test_bucket_offers_what_torch_gradbucket_offers():
    lin = nn.Linear(3, 2)
    flat = torch.arange(8, dtype=torch.float32)
    bucket = Bucket(4, "lin", [lin.weight, lin.bias], flat, (lin,), is_last_bucket=False)
    w, b = bucket.gradients()
    assert w.shape == (2, 3) and b.shape == (2,) and w.data_ptr() == flat.data_ptr()  # views, no copies
    assert b.tolist() == [6.0, 7.0]
    assert bucket.index() == 4 and bucket.parameters() == [lin.weight, lin.bias] and not bucket.is_last()
    assert bucket.modules == (lin,) and bucket.buffer() is flat
    bucket.set_buffer(flat * 2)
    assert bucket.buffer()[1] == 2.0


def test_a_step_without_seeds_contributes_zeros_even_from_nan_gradients():
    with one_rank_group():
        state = AllreduceState()
        state.weights.begin_step(0)
        bucket = Bucket(0, "x", [], torch.tensor([float("nan"), 1.0]))
        assert seed_weighted_allreduce(state, bucket).wait().tolist() == [0.0, 0.0]
    w = SeedWeights()
    w.begin_step(3)
    assert (w.total(), w.scale()) == (3, 1.0)


def _weighted_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    # Seeds 1, 3: the hook returns (1/4) g_0 + (3/4) g_1 on both ranks.
    state = AllreduceState()
    state.weights.begin_step(1 + 2 * rank)
    grad = torch.full((3,), float(rank + 1))  # rank 0's mean gradient 1, rank 1's 2
    out = comm.wait_future(seed_weighted_allreduce(state, Bucket(0, "g", [], grad)))
    assert torch.allclose(out, torch.full((3,), 0.25 * 1 + 0.75 * 2)), out
    assert state.weights.total() == 4


def test_seed_weighted_mean_over_two_ranks():
    launch(_weighted_body, 2, timeout=60)
