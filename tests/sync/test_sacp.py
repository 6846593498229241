"""SACP: captured factors rebuild the gradient; sufficient factors equal dense over ranks of different K."""

import warnings

import pytest
import torch
from torch import nn

from graphdist.sync.sacp import LinearCapture, sacp_choice
from graphdist.testing import launch


def test_factors_rebuild_the_weight_and_bias_gradient_of_torch_and_pyg_linears():
    from torch_geometric.nn import Linear as PygLinear

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), PygLinear(5, 4))
    cap = LinearCapture(net)
    assert len(cap.linears) == 2  # PyG's Linear is not a torch Linear subclass, and is found anyway
    x = torch.randn(7, 6)
    (net(x).pow(2).sum() + net(x[:3]).sum()).backward()  # two calls per step: rows concatenate
    for lin in cap.linears:
        u, v = cap.factors(lin)
        assert cap.rows(lin) == 10 and u.shape[0] == v.shape[0] == 10
        torch.testing.assert_close(u.t() @ v, lin.weight.grad)
        torch.testing.assert_close(u.sum(0), lin.bias.grad)
    with torch.no_grad():
        cap.reset()
        net(x)
    assert cap.rows(cap.linears[0]) == 0  # evaluation captures nothing


def test_a_linear_whose_own_rows_rule_factors_out_keeps_nothing():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    # P = 2: factors need K (64 + 64) <= 64 * 64, K <= 32. 40 rows rule them out for every Linear
    # but the forced last one; a second call of 20 rows keeps counting.
    cap = LinearCapture(net, prune_for=2, keep=[net[4]])
    x = torch.randn(40, 64)
    (net(x).sum() + net(x[:20]).sum()).backward()
    assert [cap.rows(lin) for lin in cap.linears] == [60, 60, 60]
    with pytest.raises(RuntimeError, match="rule factors out for 2 ranks, so none were kept"):
        cap.factors(net[0])
    # Nothing of the pruned layers outlives backward (their output gradients would: K x M each).
    assert not any(cap._grads.get(id(net[i])) or cap._inputs.get(id(net[i])) for i in (0, 2))
    u, v = cap.factors(net[4])  # forced: kept whatever its rows
    torch.testing.assert_close(u.t() @ v, net[4].weight.grad)
    cap.reset()
    net.zero_grad()
    net(x[:30]).sum().backward()  # a new step decides afresh: 30 rows allow factors again
    u, v = cap.factors(net[0])
    torch.testing.assert_close(u.t() @ v, net[0].weight.grad)


def test_a_linear_pruned_by_its_second_call_keeps_no_gradient_of_its_first():
    net = nn.Sequential(nn.Linear(64, 64))
    cap = LinearCapture(net, prune_for=2)  # K <= 32 allows factors: 20 rows do, 20 more do not
    x = torch.randn(20, 64)
    first = net(x)
    kept = cap._grads[id(net[0])]  # what the first call's hook appends to
    (first.sum() + net(x).sum()).backward()
    assert cap.rows(net[0]) == 40 and kept == [] and id(net[0]) not in cap._grads


def test_poseidon_rule_at_its_boundary():
    m = n = 1024
    threshold = 2 * m * n / 2 / (m + n)  # K (M+N) <= 2MN/P, P = 2: K <= 512
    assert sacp_choice([int(threshold), 3], m, n) == "sfb"
    assert sacp_choice([int(threshold) + 1, 3], m, n) == "dense"
    # In bytes: fp16 factors against an int8 ring (1 + 4/512 bytes a value) need K <= 512 * 1.0078 / 2.
    int8 = 1 + 4 / 512
    assert sacp_choice([258, 3], m, n, factor_bytes=2, dense_bytes=int8) == "sfb"
    assert sacp_choice([259, 3], m, n, factor_bytes=2, dense_bytes=int8) == "dense"


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 256)  # fed many rows: dense
        self.out = nn.Linear(256, 256)  # fed few rows: sufficient factors

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        return self.out(h[: max(0, h.shape[0] // 8)])


def _body(rank: int, world_size: int) -> None:
    from graphdist import comm
    from graphdist.sync import make_sync

    warnings.simplefilter("ignore")
    rows = [160, 48, 0][rank]  # different K on every rank, and a rank with no seeds
    x = torch.randn(rows, 8, generator=torch.Generator().manual_seed(rank))
    grads, sent = {}, {}
    for sacp in (False, True):
        torch.manual_seed(0)
        net = _Wide()
        sync = make_sync("dwbp", net, sacp=sacp)
        for _ in range(2):  # the second step runs in the learned launch order
            net.zero_grad()
            comm.reset_byte_counts()
            sync.begin_step(rows // 8)
            out = sync.model(x)
            (out.pow(2).mean() if out.numel() else out.sum() + 0 * sum(p.sum() for p in net.parameters())).backward()
            sync.finish()
        grads[sacp] = [p.grad.clone() for p in net.parameters()]
        sent[sacp] = comm.byte_counts()["grad"]
        if sacp:
            state = sync.hook_state
            assert state.choices == {"out": "sfb", "inp": "dense"}, state.choices
            # what this rank handed the backend for the factors: its K rows of [u | v] to each of P-1 peers
            k = rows // 8
            assert state.scheme_bytes[("out", "sfb")] == 2 * (world_size - 1) * k * (256 + 256) * 4
        sync.close()
    for dense, factored in zip(grads[False], grads[True]):
        torch.testing.assert_close(factored, dense, rtol=1e-4, atol=1e-6)
    assert sent[True] < sent[False]
    # Every rank applies the same gradient, bit for bit (its own share comes from its factors too).
    everyone = comm.all_gather_object(grads[True])
    assert all(torch.equal(a, b) for mine in everyone[1:] for a, b in zip(everyone[0], mine))


def test_sufficient_factors_equal_dense_over_ranks_of_different_k():
    launch(_body, 3, timeout=90)


def test_a_tied_weight_is_refused_not_trained_wrong():
    from graphdist.sync.hooks import Bucket
    from graphdist.sync.sacp import make_sacp, sacp_allreduce

    lin = nn.Linear(4, 4)
    hook, state = make_sacp(lin, None, None)
    state._thread = object()  # as if peers existed: the factor path runs up to its guard
    state.weights.begin_step(1)
    x = torch.randn(3, 4)
    (lin(x).sum() + lin.weight.pow(2).sum()).backward()  # the weight gets gradient outside the Linear too
    flat = torch.cat([lin.weight.grad.view(-1), lin.bias.grad])
    with pytest.raises(RuntimeError, match=r"not only its Linear's.*--sacp off"):
        sacp_allreduce(state, Bucket(0, "lin", [lin.weight, lin.bias], flat, (lin,)))


class _Embedded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(2000, 16)  # learnable node embeddings
        self.head = nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(ids))


def _embedding_body(rank: int, world_size: int) -> None:
    from graphdist import comm
    from graphdist.sync import make_sync

    warnings.simplefilter("ignore")
    bytes_by_touched = {}
    for touched in (10, 40):
        ids = torch.randint(0, 2000, (touched,), generator=torch.Generator().manual_seed(rank + touched)).unique()
        grads = {}
        for sacp in (False, True):
            torch.manual_seed(0)
            net = _Embedded()
            sync = make_sync("dwbp", net, sacp=sacp)
            for _ in range(2):
                net.zero_grad()
                sync.begin_step(len(ids))
                sync.model(torch.cat([ids, ids[:3]])).pow(2).mean().backward()  # a repeated row counts once
                sync.finish()
            grads[sacp] = net.table.weight.grad.clone()
            if sacp:
                assert sync.hook_state.choices["table"] == "sparse", sync.hook_state.choices
                bytes_by_touched[touched] = sync.hook_state.scheme_bytes[("table", "sparse")] / 2
                assert bytes_by_touched[touched] == (world_size - 1) * len(ids) * (8 + 4 * 16)
            sync.close()
        torch.testing.assert_close(grads[True], grads[False], rtol=1e-5, atol=1e-7)
    assert bytes_by_touched[40] > 3 * bytes_by_touched[10]  # the bytes follow the rows touched


def test_embedding_rows_equal_dense_and_bytes_scale_with_rows_touched():
    launch(_embedding_body, 2, timeout=90)


class _Narrow(nn.Module):
    """Every Linear fed more rows than factors can pay for: dense on any rank's rows alone."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.inp(x)))


def _no_mid_step_barrier_body(rank: int, world_size: int, flags: str) -> None:
    import time
    from pathlib import Path

    from graphdist.sync import make_sync

    warnings.simplefilter("ignore")
    net = _Narrow()
    sync = make_sync("dwbp", net, sacp=True)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(rank))
    if rank == 0:  # flags the step when it enters finish()'s wait for the gradients (its clock started)
        flush = sync._flush_and_wait
        sync._flush_and_wait = lambda: ((Path(flags) / f"step-{step}").touch(), flush())[1]
    for step in range(2):
        net.zero_grad()
        sync.begin_step(64)
        if rank == 1:
            # A slower rank: its forward (which sends its rows) starts only after rank 0 has ended its
            # backward and entered the gradient wait, then sleeps 0.3 s more. Had rank 0's backward
            # waited for these rows, the two would deadlock here: an ordering, not a race.
            deadline = time.monotonic() + 20
            while not (Path(flags) / f"step-{step}").exists():
                assert time.monotonic() < deadline, "rank 0 never reached its gradient wait: its backward waited"
                time.sleep(0.01)
            time.sleep(0.3)
        out = sync.model(x)
        out.pow(2).mean().backward()
        stats = sync.finish()
    assert sync.hook_state.choices == {"out": "dense", "inp": "dense"}, sync.hook_state.choices
    if rank == 0:
        # Its rows rule factors out: backward ended without the other rank's rows (else no flag), and
        # the wait for the slower rank is the gradient exchange at the end, in `exposed`: at least the
        # 0.3 s rank 1 slept after this rank entered it, however slow either rank ran.
        assert stats.exposed_s >= 0.3, stats
    sync.close()


def test_a_layer_dense_on_its_own_rows_does_not_wait_for_the_other_ranks_forward(tmp_path):
    launch(_no_mid_step_barrier_body, 2, str(tmp_path), timeout=90)


def _settle_body(rank: int, world_size: int) -> None:
    from graphdist import comm
    from graphdist.sync import make_sync
    from graphdist.sync.sacp_capture import SETTLE_STEPS

    warnings.simplefilter("ignore")
    steps = SETTLE_STEPS + 2
    for fed, settles in ((8 * 20, {0}), (8 * 600, {0, 1})):  # `out` fed 20 rows: factors; 600: dense
        x = torch.randn(fed, 8, generator=torch.Generator().manual_seed(rank))
        grads = {}
        for sacp in (False, True):
            torch.manual_seed(0)
            net = _Wide()
            sync = make_sync("dwbp", net, sacp=sacp)
            for step in range(steps):
                net.zero_grad()
                sync.begin_step(fed // 8)
                sync.model(x).pow(2).mean().backward()
                sync.finish()
                if sacp:
                    weights = sync.hook_state.weights
                    # Settled from the step after SETTLE_STEPS dense ones (begin_step reads the last table).
                    assert weights.settled == (settles if step >= SETTLE_STEPS else set()), (step, weights.settled)
                    if weights.settled == {0, 1}:
                        assert weights._issued_rows is None and weights._rows_handle is None  # no rows gathered
            grads[sacp] = [p.grad.clone() for p in net.parameters()]
            if sacp:
                saved = sync.state_dict()
                assert saved["hook"]["settled"] == sorted(settles)
                sync.close()
                resumed = make_sync("dwbp", _Wide(), sacp=True)
                resumed.load_state_dict(saved)
                assert resumed.hook_state.weights.settled == settles
                resumed.close()
            else:
                sync.close()
        for dense, factored in zip(grads[False], grads[True]):
            torch.testing.assert_close(factored, dense, rtol=1e-4, atol=1e-6)
    comm.barrier()


def test_layers_dense_by_a_wide_margin_settle_and_their_rows_stop_travelling():
    launch(_settle_body, 2, timeout=90)
