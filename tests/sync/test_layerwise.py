"""Layer-wise sync == blocking all-reduce == DDP == one process on the concatenated batch; DWBP is wait-free."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from graphdist.testing import launch

STEPS = 4
LR = 0.1


class _Net(nn.Module):
    """Three layers plus one never used (registered last: the first-step order is wrong)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(4, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.unused = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def _shares(step: int, world_size: int) -> list[int]:
    """Uneven batch shares; rank 0 has no samples at step 1."""
    if step == 1:
        return [0] + [r + 2 for r in range(1, world_size)]
    if step % 2 == 0:
        return [r + 1 for r in range(world_size)]
    return [world_size - r for r in range(world_size)]


def _data(world_size: int):
    gen = torch.Generator().manual_seed(123)
    out = []
    for step in range(STEPS):
        total = sum(_shares(step, world_size))
        out.append((torch.randn(total, 4, generator=gen), torch.randn(total, 3, generator=gen)))
    return out


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if out.shape[0] == 0:
        return out.sum() * 0.0  # an empty share still runs backward
    return nn.functional.mse_loss(out, y)  # mean over this rank's samples


def _reference(world_size: int) -> _Net:
    torch.manual_seed(7)
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for x, y in _data(world_size):
        opt.zero_grad()
        _loss(net(x), y).backward()
        opt.step()
    return net


def _watch_input_gradient(sync, layer: nn.Module, name: str) -> None:
    """Puts ("input-grad", name) in the sync's timeline when backward starts computing ``layer``'s input gradient."""

    from graphdist.testing.models import input_gradient_node

    def on_forward(_module, inputs, output) -> None:
        if output.requires_grad and inputs[0].grad_fn is not None:
            node = input_gradient_node(output, inputs[0])
            node.register_prehook(lambda *_: sync.timeline.append(("input-grad", name, 0.0)))

    layer.register_forward_hook(on_forward)


def _train(rank: int, world_size: int, mode: str, sync_cls=None, set_to_none: bool = True):
    from graphdist.sync import make_sync

    torch.manual_seed(7)
    net = _Net()
    if sync_cls is None:
        sync = make_sync(mode, net, find_unused_parameters=(mode == "ddp"))
    else:
        sync = sync_cls(net, mode=mode)
    if mode == "dwbp":
        _watch_input_gradient(sync, net.fc2, "fc2")
    model = sync.model
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    timelines, stats = [], []
    sync.grad_storage = []  # per step, where each gradient lives
    for step, (x, y) in enumerate(_data(world_size)):
        shares = _shares(step, world_size)
        lo = sum(shares[:rank])
        xs, ys = x[lo : lo + shares[rank]], y[lo : lo + shares[rank]]
        opt.zero_grad(set_to_none=set_to_none)
        sync.begin_step(int(xs.shape[0]))
        _loss(model(xs), ys).backward()
        stats.append(sync.finish())
        sync.grad_storage.append([p.grad.data_ptr() if p.grad is not None else None for p in net.parameters()])
        opt.step()
        timelines.append(list(sync.timeline))
        assert stats[-1].total_seeds == x.shape[0], (stats[-1].total_seeds, x.shape[0])
    return net, sync, timelines, stats


def _assert_same(net: nn.Module, ref: nn.Module, what: str) -> None:
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6, msg=lambda m: f"{what} {name}: {m}")


def _waiting_sync():
    """A deliberately blocking DWBP: the scheduler waits for each layer right after launching it."""
    from graphdist.sync import LayerwiseSync

    class WaitingSync(LayerwiseSync):
        def _launch(self, index: int) -> None:
            super()._launch(index)
            self._wait_and_write(index)

    return WaitingSync


def _body(rank: int, world_size: int) -> None:
    from graphdist.sync import wait_free_witness

    warnings.simplefilter("ignore")
    ref = _reference(world_size)
    for mode in ("dwbp", "blocking", "ddp"):
        net, sync, timelines, stats = _train(rank, world_size, mode)
        _assert_same(net, ref, mode)
        if mode == "dwbp":
            # The first step learns the launch order: the unused layer moves last.
            assert [layer.name for layer in sync.layers] == ["fc3", "fc2", "fc1", "unused"], sync.layers
            for tl in timelines[1:]:
                assert wait_free_witness(tl, "fc3"), tl
            # Weight gradients first (graphdist.sync.reorder): fc2's collective leaves before
            # backward computes fc2's input gradient, so that GEMM runs under it (from step 2: the
            # first step's order waits for the unused layer, flushed by finish()).
            for tl in timelines[1:]:
                events = [(kind, layer) for kind, layer, _ in tl]
                assert events.index(("launch", "fc2")) < events.index(("input-grad", "fc2")), events
            # Every step communicated, and each layer's service time is within its launch-to-wait window.
            for s in stats:
                assert s.comm_s > 0 and len(s.layers) == 4, s
                assert all(t.launch_s <= t.complete_s for t in s.layers), s.layers
            assert sync.summary.steps == STEPS
            assert sync.summary.comm_s == pytest.approx(sum(s.comm_s for s in stats))
        if mode == "blocking":
            assert not any(wait_free_witness(tl, "fc3") for tl in timelines)
    # Kept gradients (zero_grad(set_to_none=False)) are views of one buffer per layer from the
    # first step on: the same storage every step, each layer's gradients side by side in it.
    net, sync, _, _ = _train(rank, world_size, "dwbp", set_to_none=False)
    _assert_same(net, ref, "dwbp, gradients kept")
    assert all(ptrs == sync.grad_storage[0] for ptrs in sync.grad_storage), sync.grad_storage
    for layer in sync.layers:
        starts = [p.grad.data_ptr() for p in layer.params]
        ends = [p.grad.data_ptr() + 4 * p.numel() for p in layer.params]
        assert starts[1:] == ends[:-1], (layer.name, starts, ends)
    # Waiting right after each launch gives the same numbers but fails the check.
    net, sync, timelines, _ = _train(rank, world_size, "dwbp", _waiting_sync())
    _assert_same(net, ref, "wait-in-hook")
    assert not any(wait_free_witness(tl, "fc3") for tl in timelines[1:])


@pytest.mark.parametrize("world_size", [2, 3])
def test_layerwise_equals_blocking_ddp_and_single_process(world_size):
    launch(_body, world_size, timeout=90)


# ------------------------------------------------------------ in-process


def test_without_process_group_gradients_stay_local_and_steps_are_timed():
    from graphdist.sync import LayerwiseSync

    torch.manual_seed(0)
    net = _Net()
    with pytest.warns(UserWarning, match="nothing to synchronise"):
        sync = LayerwiseSync(net)
    x, y = torch.randn(5, 4), torch.randn(5, 3)
    sync.begin_step(5)
    _loss(net(x), y).backward()
    grads = [p.grad.clone() for p in net.fc3.parameters()]
    stats = sync.finish()
    assert [g.equal(p.grad) for g, p in zip(grads, net.fc3.parameters())] == [True, True]
    assert stats.total_seeds == 5 and stats.comm_s == 0.0 and stats.layers == []
    # Backward is timed from the first gradient hook to the last: 3 ready layers, in order.
    grads = [t for kind, _, t in sync.timeline if kind == "grad"]
    assert len(grads) == 6 and stats.backward_s == pytest.approx(grads[-1] - grads[0])
    # A group of one rank is a job of one worker (graphdist-train --num-workers 1): no warning.
    from graphdist.testing import one_rank_group

    with one_rank_group(), warnings.catch_warnings():
        warnings.simplefilter("error")
        LayerwiseSync(_Net()).close()
    assert [k for k, _, _ in sync.timeline if k == "ready"] == ["ready"] * 3  # unused never ready
    with pytest.raises(RuntimeError, match="finish\\(\\) without begin_step"):
        sync.finish()
    with pytest.raises(RuntimeError, match="outside begin_step"):
        _loss(net(x), y).backward()


def test_layers_discovery_and_explicit_grouping():
    from torch_geometric.nn import GraphSAGE as PygSAGE

    from graphdist.sync import LayerwiseSync, discover_layers, make_sync

    pyg = PygSAGE(4, 8, num_layers=2, out_channels=3)
    names = [layer.name for layer in discover_layers(pyg)]
    assert "convs" not in names and "convs.0.lin_l" in names and "convs.1.lin_r" in names
    net = _Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sync = LayerwiseSync(net, layers=[[net.fc1, net.fc2], net.fc3, [net.unused.weight, net.unused.bias]])
        assert [layer.name for layer in sync.layers] == ["group2", "fc3", "group0"]
        with pytest.raises(ValueError, match="exactly one layer .*unused"):
            LayerwiseSync(net, layers=[net.fc1, net.fc2, net.fc3])
        with pytest.raises(ValueError, match="one layer only"):
            LayerwiseSync(net, layers=[net.fc1, net.fc1, net.fc2, net.fc3, net.unused])
        with pytest.raises(ValueError, match="Expected mode one of"):
            LayerwiseSync(net, mode="async")
        with pytest.raises(ValueError, match="Expected a sync mode in"):
            make_sync("async", net)


def test_dwbp_timing_model_hand_computed():
    from graphdist.sync import dwbp_timing

    # F=1; b=(1,1); c=(0.5,0.5): S=(2,3), E=(2.5,3.5); T_dwbp=max(3,3.5)=3.5, T_seq=4 -> 0.5/1.
    p = dwbp_timing(1.0, [1.0, 1.0], [0.5, 0.5])
    assert (p.t_seq, p.t_dwbp, p.sync_end) == (4.0, 3.5, (2.5, 3.5))
    assert p.hidden_fraction == pytest.approx(0.5)
    # A slow first collective queues the next one (FIFO): S=(1,2,3), E=(4,5,5.5).
    p = dwbp_timing(0.0, [1.0, 1.0, 1.0], [3.0, 1.0, 0.5])
    assert p.sync_end == (4.0, 5.0, 5.5) and p.t_dwbp == 5.5 and p.t_seq == 7.5
    assert p.hidden_fraction == pytest.approx(2.0 / 4.5)
    # Communication shorter than the remaining backward is fully hidden except the last layer's.
    p = dwbp_timing(2.0, [2.0, 2.0], [1.0, 0.25])
    assert p.t_dwbp == 6.25 and p.hidden_fraction == pytest.approx(1.0 / 1.25)
    assert dwbp_timing(1.0, [1.0], [0.0]).hidden_fraction == 0.0
    with pytest.raises(ValueError, match="one comm time per layer"):
        dwbp_timing(0.0, [1.0], [])


def _late_peer_body(rank: int, world_size: int) -> None:
    import time as _time

    from graphdist.sync import make_sync

    for mode in ("dwbp", "blocking", "ddp"):
        torch.manual_seed(0)
        net = _Net()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sync = make_sync(mode, net, find_unused_parameters=(mode == "ddp"))
        x, y = torch.randn(4, 4), torch.randn(4, 3)
        waits = []
        for step in range(2):
            if rank == 1 and step == 1:
                _time.sleep(0.6)  # rank 1 starts step 2 late: rank 0 waits for it inside backward
            sync.begin_step(4)
            _loss(sync.model(x), y).backward()
            waits.append(sync.finish().count_wait_s)
        sync.close()
        # Rank 0's wait for the late peer is reported as a wait (the trainer keeps it out of the
        # rank's own work: the rebalancer's busy time), wherever in the step it happened.
        late_wait = waits[1] + sync.last_step_stats.exposed_s
        if rank == 0:
            assert late_wait > 0.4, (mode, waits)
        else:
            assert waits[1] < 0.3, (mode, waits)


def test_a_wait_for_a_late_peer_is_reported_as_waiting_not_work():
    launch(_late_peer_body, 2, timeout=60)
