"""graphdist.models.dense: the oneDNN products equal F.linear's, padded or not, with and without autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphdist.models import dense
from graphdist.models.dense import Linear, linear, uses_onednn
from graphdist.models.gcn import GCNLayer

# (rows, in, out): padded (3155 rows), a multiple of 64 (unpadded), above PAD_BELOW (unpadded),
# narrow (out < PAD_MIN_OUT: unpadded), and small (below MIN_MACS: F.linear).
SHAPES = [(3155, 100, 128), (3200, 100, 128), (dense.PAD_BELOW + 5, 32, 64), (2708, 1433, 16), (40, 16, 8)]


def _reference_and_ours(rows: int, in_dim: int, out_dim: int, bias: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_dim, in_dim, generator=gen)
    b = torch.randn(out_dim, generator=gen) if bias else None
    x = torch.randn(rows, in_dim + 1, generator=gen)[:, :-1]  # row-strided, as GCN's features less their degree column
    grad = torch.randn(rows, out_dim, generator=gen)
    out = []
    for fn in (F.linear, linear):
        xs, ws = x.clone().requires_grad_(), weight.clone().requires_grad_()
        bs = b.clone().requires_grad_() if bias else None
        y = fn(xs, ws, bs)
        y.backward(grad)
        out.append((y.detach(), xs.grad, ws.grad, bs.grad if bias else None))
    return out


@pytest.mark.parametrize("rows,in_dim,out_dim", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_equals_f_linear_in_values_and_gradients(onednn, rows: int, in_dim: int, out_dim: int,
                                                        bias: bool) -> None:
    ref, ours = _reference_and_ours(rows, in_dim, out_dim, bias)
    for name, a, b in zip(("output", "grad x", "grad weight", "grad bias"), ref, ours):
        if a is None:
            continue
        assert b.shape == a.shape and b.is_contiguous(), name
        # float32 sums of up to `rows` terms in another order: relative error ~1e-6 of the magnitude.
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-4 * max(1.0, float(a.abs().max())), msg=name)


def test_a_padded_output_can_be_modified_in_place_and_keeps_its_gradient(onednn) -> None:
    lin, ref = Linear(100, 128), torch.nn.Linear(100, 128)
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(3155, 100)
    for module in (lin, ref):
        module(x).relu_().sum().backward()  # ReLU in place on the product, as relu_dropout_ does
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(lin.bias.grad, ref.bias.grad)


def test_without_autograd_the_product_is_the_same(onednn) -> None:
    lin = Linear(100, 128)
    x = torch.randn(3155, 100)
    with torch.no_grad():
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-4)


def test_linear_is_a_torch_linear_with_the_same_state_dict_and_3d_inputs() -> None:
    lin = Linear(4, 3)
    assert isinstance(lin, torch.nn.Linear) and set(lin.state_dict()) == {"weight", "bias"}
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias))


@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # torch's note when mkldnn.flags is set on CPU
def test_only_float32_cpu_products_large_enough_and_with_onednn_enabled_use_it() -> None:
    w = torch.zeros(128, 100)
    assert not uses_onednn(torch.zeros(3155, 100, dtype=torch.float64), w.double())
    assert not uses_onednn(torch.zeros(10, 100), w)  # below MIN_MACS
    with torch.backends.mkldnn.flags(enabled=False):
        assert not uses_onednn(torch.zeros(3155, 100), w)


@pytest.fixture
def onednn(monkeypatch: pytest.MonkeyPatch):
    """The fast path forced on (GRAPHDIST_ONEDNN=1), so its code is tested on any AVX-512 CPU."""
    from graphdist.testing.env import require

    require(dense._avx512(), "oneDNN fast path needs an AVX-512 CPU and torch built with oneDNN")
    monkeypatch.setenv("GRAPHDIST_ONEDNN", "1")
    dense._onednn_pays.cache_clear()
    yield
    dense._onednn_pays.cache_clear()


def test_the_fast_path_is_for_full_width_avx512(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AMD family 26 (Zen 5) and later take it; Zen 4 (25), Intel and unreadable cpuinfo do not."""
    for vendor, family, want in [("AuthenticAMD", 26, 26), ("AuthenticAMD", 25, 25), ("GenuineIntel", 6, 0)]:
        info = tmp_path / f"{vendor}{family}"
        info.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\n\nprocessor\t: 1\n")
        assert dense.cpu_family("AuthenticAMD", str(info)) == want
    monkeypatch.setattr(dense, "cpu_family", lambda vendor: 25)
    monkeypatch.delenv("GRAPHDIST_ONEDNN", raising=False)
    dense._onednn_pays.cache_clear()
    try:
        assert not dense._onednn_pays()
        monkeypatch.setattr(dense, "cpu_family", lambda vendor: 26)
        dense._onednn_pays.cache_clear()
        assert dense._onednn_pays() == dense._avx512()
    finally:
        dense._onednn_pays.cache_clear()


def test_avx512_cpus_take_the_onednn_path_and_pad_sampled_rows_to_few_shapes(onednn) -> None:
    assert uses_onednn(torch.zeros(3155, 100), torch.zeros(128, 100))
    # A sampled batch's rows vary step to step; padded, 300 row counts make at most 6 shapes.
    padded = {dense._padded(torch.zeros(rows, 4)).shape[0] for rows in range(3000, 3300)}
    assert len(padded) <= 6 and all(r % dense.ROW_MULTIPLE == 0 for r in padded)
    # Narrow or large products are neither padded nor on oneDNN: they stay on MKL.
    assert not uses_onednn(torch.zeros(2708, 1433), torch.zeros(16, 1433))
    assert not uses_onednn(torch.zeros(dense.PAD_BELOW, 100), torch.zeros(128, 100))


def test_gcn_layer_takes_the_cheaper_order_and_both_orders_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphdist.models.gcn import gcn_norm_block
    from graphdist.testing import tiny_graph
    from sampling import NeighborSampler

    g = tiny_graph(feature_dim=16)
    batch = NeighborSampler(g, [3, 3], seed=0).sample(torch.tensor([0, 1]))
    block = gcn_norm_block(batch.blocks[0], g.degrees()[batch.input_nodes[: batch.blocks[0].num_src]])
    layer = GCNLayer(16, 4)
    x = g.x[batch.input_nodes].float()
    outs = []
    for first in (True, False):
        monkeypatch.setattr(GCNLayer, "transforms_first", lambda self, *sizes, first=first: first)
        outs.append(layer(x, block))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_the_weight_gradient_is_accumulated_before_the_input_gradient_is_computed(onednn) -> None:
    # What graphdist.sync.reorder gives F.linear under --sync dwbp: a layer's hook fires one product earlier.
    lin = Linear(100, 128)
    x = torch.randn(3155, 100, requires_grad=True)
    order: list[str] = []
    lin.weight.register_post_accumulate_grad_hook(lambda p: order.append("weight"))
    x.register_hook(lambda g: order.append("input"))
    lin(x).sum().backward()
    assert order == ["weight", "input"]


def test_strided_operands_never_reach_onednns_reference_kernel(onednn) -> None:
    # A column-sliced weight (SAGE inference's W[:, :in]) once ran oneDNN's reference kernel, 2,000x slower.
    import subprocess
    import sys

    code = ("import torch\nfrom graphdist.models.dense import linear\n"
            "w = torch.randn(32, 2 * 300); x = torch.randn(3000, 301)[:, :-1]\n"
            "linear(x, w[:, :300]); linear(x, w[:, 300:], torch.zeros(32))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                          env={**__import__("os").environ, "ONEDNN_VERBOSE": "1", "GRAPHDIST_ONEDNN": "1"})
    executed = [line for line in done.stdout.splitlines() if ",exec," in line]
    assert executed and not any("ref:" in line for line in executed), executed
