"""Weight gradients first: same gradients as F.linear, bit for bit, with the parameters' accumulated first."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from graphdist.sync.reorder import WeightFirst
from graphdist.testing.models import input_gradient_node


class _Net(nn.Module):
    """Linears with and without bias, an in-place op on a Linear's output, and a PyG Linear."""

    def __init__(self) -> None:
        super().__init__()
        from torch_geometric.nn import Linear as PygLinear

        self.a, self.b, self.c = nn.Linear(6, 32), nn.Linear(32, 32, bias=False), PygLinear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu_(self.a(x))  # in place on a Linear's output
        return self.c(torch.tanh(self.b(h)))


def _grads(net: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    for p in net.parameters():
        p.grad = None
    x.grad = None
    net(x).square().sum().backward()
    return [p.grad.clone() for p in net.parameters()] + ([x.grad.clone()] if x.requires_grad else [])


@pytest.mark.parametrize("shape", [(50, 6), (3, 7, 6)])
@pytest.mark.parametrize("input_grad", [True, False])
def test_gradients_equal_f_linear_bit_for_bit(shape, input_grad):
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(*shape, requires_grad=input_grad)
    plain = _grads(net, x)
    reorder = WeightFirst(net)
    first = _grads(net, x)
    reorder.close()
    again = _grads(net, x)
    assert all(torch.equal(u, v) for u, v in zip(plain, first))
    assert all(torch.equal(u, v) for u, v in zip(plain, again))


def test_a_linear_accumulates_its_parameters_before_computing_its_input_gradient():
    torch.manual_seed(0)
    net = _Net()
    events: list[str] = []
    for name in ("a", "b", "c"):
        getattr(net, name).weight.register_post_accumulate_grad_hook(lambda _p, n=name: events.append(f"weight {n}"))

    def watch(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        node = input_gradient_node(output, inputs[0])
        node.register_prehook(lambda *_: events.append("input of b"))

    net.b.register_forward_hook(watch)
    x = torch.randn(20, 6)
    net(x).sum().backward()
    assert events.index("input of b") < events.index("weight b"), events  # F.linear: one node, input first
    events.clear()
    reorder = WeightFirst(net)
    net(x).sum().backward()
    assert events.index("weight b") < events.index("input of b"), events
    assert events == ["weight c", "weight b", "input of b", "weight a"], events
    reorder.close()


def test_evaluation_and_closed_reorder_use_f_linear_itself():
    net = _Net()
    reorder = WeightFirst(net)
    with torch.no_grad():
        assert net.b(torch.ones(2, 32)).grad_fn is None
    assert type(net.b(torch.ones(2, 32)).grad_fn).__name__ == "_ParameterGradientsBackward"
    reorder.close()
    assert type(net.b(torch.ones(2, 32)).grad_fn).__name__ == "MmBackward0"
    clone = copy.deepcopy(net)
    assert type(clone.b(torch.ones(2, 32)).grad_fn).__name__ == "MmBackward0"


def test_a_model_copied_or_pickled_while_rerouted_trains_to_the_same_gradients():
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(9, 6)
    plain = _grads(net, x)
    reorder = WeightFirst(net)
    for clone in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        out = clone.b(torch.ones(2, 32, requires_grad=True))
        assert type(out.grad_fn).__name__ == "_ParameterGradientsBackward"  # the copy reroutes too
        assert all(torch.equal(u, v) for u, v in zip(plain, _grads(clone, x)))
    reorder.close()



def test_autocast_sparse_and_evaluation_calls_keep_f_linear():
    net = _Net()
    reorder = WeightFirst(net)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net.b(torch.ones(2, 32))
    assert out.dtype == torch.bfloat16 and type(out.grad_fn).__name__ != "_ParameterGradientsBackward"
    out.float().sum().backward()  # autocast's own backward: no dtype clash
    sparse = torch.eye(32).to_sparse()
    assert torch.equal(net.b(sparse), torch.nn.functional.linear(torch.eye(32), net.b.weight))
    with torch.no_grad():
        net(torch.ones(3, 6))
    assert reorder._entered() == {}  # nothing entered or left behind
    reorder.close()
