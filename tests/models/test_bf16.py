"""--precision bf16 in the models: under CPU autocast, graphdist's Linear multiplies in bfloat16 (padded,
on oneDNN) and hands float32 back; small products and everything else stay float32."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphdist.models import dense
from graphdist.models.dense import Linear, linear
from graphdist.testing.env import require


@pytest.fixture
def bf16_cpu():
    require(dense.native_bf16(), "this CPU has no bfloat16 instructions (AVX512_BF16 or AMX)")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield


def _operands(rows: int = 3155, in_dim: int = 100, out_dim: int = 128, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, in_dim + 1, generator=gen)[:, :-1], torch.randn(out_dim, in_dim, generator=gen),
            torch.randn(out_dim, generator=gen), torch.randn(rows, out_dim, generator=gen))


def _bf16_reference(x, weight, bias, grad):
    """The same products from bfloat16-rounded operands, accumulated in float64: what a bf16 product computes."""
    xb, wb, gb = (t.bfloat16().double() for t in (x, weight, grad))
    return (xb @ wb.t() + bias.double(), gb @ wb, gb.t() @ xb, grad.double().sum(0))


def test_large_products_multiply_in_bfloat16_and_return_float32(bf16_cpu) -> None:
    x, weight, bias, grad = _operands()
    xs, ws, bs = x.clone().requires_grad_(), weight.clone().requires_grad_(), bias.clone().requires_grad_()
    y = linear(xs, ws, bs)
    y.backward(grad)
    assert y.dtype == xs.grad.dtype == ws.grad.dtype == bs.grad.dtype == torch.float32
    assert y.shape == (3155, 128) and ws.grad.is_contiguous()
    ref = _bf16_reference(x, weight, bias, grad)
    for name, got, want in zip(("output", "grad x", "grad weight", "grad bias"), (y, xs.grad, ws.grad, bs.grad), ref):
        # Accumulated in float32, rounded to bfloat16 once at the end (the output and gradients of
        # the products): relative error within bf16's 2**-8 of the largest value.
        scale = float(want.abs().max())
        torch.testing.assert_close(got.double(), want, rtol=0.0, atol=scale * 2 ** -7, msg=name)
    # And not float32's products: those differ from the bf16-rounded operands' by far more than float32 rounding.
    exact = F.linear(x.double(), weight.double(), bias.double())
    assert float((y.detach().double() - exact).abs().max()) > 1e-3


def test_bfloat16_rounding_shows_in_the_output(bf16_cpu) -> None:
    # 1 + 2**-10 is 1.0 in bfloat16 (8 significant bits); float32 keeps it.
    x = torch.full((3155, 100), 1.0 + 2 ** -10)
    y = linear(x, torch.ones(128, 100))
    assert torch.equal(y, torch.full((3155, 128), 100.0))
    with torch.autocast("cpu", enabled=False):
        assert float(linear(x, torch.ones(128, 100))[0, 0]) > 100.05


def test_small_products_stay_float32_under_autocast(bf16_cpu) -> None:
    x, weight, bias, _ = _operands(rows=40, in_dim=16, out_dim=8)
    y = linear(x, weight, bias)
    with torch.autocast("cpu", enabled=False):
        assert y.dtype == torch.float32 and torch.equal(y, F.linear(x, weight, bias))


def test_bf16_products_pad_rows_to_few_shapes_above_pad_below_too(bf16_cpu) -> None:
    # oneDNN builds a kernel per shape (1-2 ms each, cached): unpadded, every batch's new row count paid one.
    w = torch.zeros(128, 100)
    for rows in (3155, dense.PAD_BELOW + 5):
        assert dense._product_dtype(torch.zeros(rows, 100), w) == torch.bfloat16
    assert dense._product_dtype(torch.zeros(2708, 1433), torch.zeros(16, 1433)) == torch.bfloat16  # narrow too
    assert dense._product_dtype(torch.zeros(10, 100), w) is None  # below MIN_MACS
    padded = dense._padded(torch.zeros(3155, 4), torch.bfloat16)
    assert padded.dtype == torch.bfloat16 and padded.shape[0] == dense._padded_rows(3155)


def test_without_bf16_instructions_products_stay_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense, "native_bf16", lambda: False)
    x, weight, bias, _ = _operands()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(x, weight, bias)
    with torch.autocast("cpu", enabled=False):
        assert y.dtype == torch.float32 and torch.equal(y, F.linear(x, weight, bias))


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_reference_models_keep_float32_activations_and_gradients(bf16_cpu, name: str) -> None:
    from graphdist.data.synthetic import synthetic
    from graphdist.models import build_model
    from graphdist.models.gcn import gcn_norm_block
    from sampling import NeighborSampler

    g = synthetic(4000, num_features=600, num_classes=5)
    batch = NeighborSampler(g, [10, 10], seed=0).sample(torch.arange(512))
    blocks = batch.blocks
    if name == "gcn":
        degrees = g.degrees()[batch.input_nodes]
        blocks = [gcn_norm_block(b, degrees[: b.num_src]) for b in blocks]
    torch.manual_seed(0)
    model = build_model(name, 600, 64, 5, 2, dropout=0.5)
    seen: list[torch.dtype] = []
    for module in model.modules():
        if isinstance(module, Linear):
            module.register_forward_hook(lambda m, args, out: seen.append(out.dtype))
    out = model(g.x[batch.input_nodes].float(), blocks)
    assert any(dense.uses_onednn(torch.zeros(rows, 600), torch.zeros(64, 600)) for rows in (blocks[0].num_dst,))
    F.cross_entropy(out, g.y[batch.seed_nodes]).backward()
    assert out.dtype == torch.float32 and seen and set(seen) == {torch.float32}
    assert all(p.grad.dtype == torch.float32 and bool(p.grad.isfinite().all()) for p in model.parameters())
