"""The model contract, an adapter for user modules, ``build_model`` and ``check_picklable``.

Contract: any ``nn.Module`` with ``forward(x, blocks) -> Tensor`` trains with graphdist.
``x`` holds the features of ``blocks[0]``'s source nodes; the result has one row per seed
(``blocks[-1].num_dst``). Each block gives ``edge_index`` (``2 x E``, block-local ids),
``size = (num_src, num_dst)``, ``num_dst`` (destination ``i`` is source ``i``) and, for
GCN, ``edge_weight``. A PyG layer that accepts bipartite input works in the plain loop::

    class MyGNN(torch.nn.Module):              # in an importable module, not __main__
        def __init__(self, d_in, d_hid, n_cls):
            super().__init__()
            self.convs = torch.nn.ModuleList([GATConv(d_in, d_hid), GATConv(d_hid, n_cls)])

        def forward(self, x, blocks):
            for i, (conv, b) in enumerate(zip(self.convs, blocks)):
                x = conv((x, x[: b.num_dst]), b.edge_index)
                if i < len(self.convs) - 1:
                    x = x.relu()
            return x

A model that also has ``num_layers`` and ``layer_forward(i, x, block)`` (layer ``i`` with its
activation) gets exact layer-at-a-time full-neighbour inference; others are evaluated with
``forward`` on full-neighbour blocks in chunks. :func:`as_block_model` turns a list of PyG
layers into such a model.

Spawned workers re-import the model's class by module path. A class in the script that
``__main__`` runs reaches them (spawn re-runs the script as ``__mp_main__``, so guard its
entry point with ``if __name__ == "__main__":``); one typed into a notebook or REPL cannot:
:func:`check_picklable` says so at once instead of a worker failing later.

Example:
    >>> model = build_model("sage", in_dim=16, hidden=32, out_dim=4, num_layers=2, dropout=0.5)
    >>> check_picklable(model)
    >>> supports_layerwise(model)
    True
"""

from __future__ import annotations

import inspect
import io
import os
import pickle
import sys
from typing import Any, Callable, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from graphdist.models.base import LayerwiseGNN
from graphdist.models.registry import MODELS, model_class


PICKLE_ADVICE = (
    "define the model class in an importable module (not __main__ / a notebook cell) "
    "or use a factory function in a module"
)


def build_model(
    name: str, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5, **kwargs: Any
) -> nn.Module:
    """A reference model by name: ``"sage"`` (or ``"graphsage"``), ``"gcn"``, ``"gat"``.

    Args:
        name: model name (case-insensitive).
        in_dim: input feature size.
        hidden: hidden size (per head for GAT).
        out_dim: number of classes.
        num_layers: layers, one block each (default 2).
        dropout: dropout between layers (default 0.5).
        **kwargs: model-specific (``aggr`` for sage; ``heads``, ``out_heads``, ``attn_dropout`` for gat).

    Returns:
        The model.

    Raises:
        ValueError: on an unknown name.

    Example:
        >>> build_model("gat", 8, 4, 3, num_layers=2, heads=2).num_layers
        2
    """
    return model_class(name)(in_dim, hidden, out_dim, num_layers=num_layers, dropout=dropout, **kwargs)


class BlockSequential(LayerwiseGNN):
    """PyG-style layers applied block by block: ``x = conv((x, x[:num_dst]), edge_index)``.

    Args:
        convs: one layer per block; each accepts ``((x_src, x_dst), edge_index)``.
        activation: applied after every layer but the last (default ReLU).
        dropout: dropout after every hidden activation (default 0.0).
        edge_weight: also pass ``block.edge_weight`` as the third argument (GCNConv-like layers).

    Example:
        >>> from torch_geometric.nn import SAGEConv
        >>> model = BlockSequential([SAGEConv(8, 16), SAGEConv(16, 3)])
        >>> model.num_layers
        2
    """

    def __init__(
        self,
        convs: Sequence[nn.Module],
        activation: Callable[[torch.Tensor], torch.Tensor] = F.relu,
        dropout: float = 0.0,
        edge_weight: bool = False,
    ) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.num_layers = len(self.convs)
        self.activation, self.dropout, self.edge_weight = activation, float(dropout), edge_weight

    def layer_forward(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        """Layer ``i`` on one block, with the activation and dropout for hidden layers."""
        args: list[Any] = [(x, x[: int(block.num_dst)]), block.edge_index]
        if self.edge_weight:
            args.append(getattr(block, "edge_weight", None))
        h = self.convs[i](*args)
        if i < self.num_layers - 1:
            h = F.dropout(self.activation(h), self.dropout, self.training)
        return h


def as_block_model(module: Union[nn.Module, Sequence[nn.Module]], **kwargs: Any) -> nn.Module:
    """A model that follows the contract, from a module or a list of PyG layers.

    A module whose ``forward`` takes ``(x, blocks)`` is returned as is; an ``nn.ModuleList``
    or a list/tuple of layers becomes a :class:`BlockSequential` (``kwargs`` go to it).

    Args:
        module: a block model, or PyG-style layers (one per block).
        **kwargs: ``activation``, ``dropout``, ``edge_weight`` for :class:`BlockSequential`.

    Returns:
        A module with ``forward(x, blocks)``.

    Raises:
        TypeError: for anything else, saying what was expected.

    Example:
        >>> from torch_geometric.nn import GATConv
        >>> model = as_block_model([GATConv(8, 16), GATConv(16, 3)])
    """
    if isinstance(module, (nn.ModuleList, list, tuple)):
        return BlockSequential(list(module), **kwargs)
    if isinstance(module, nn.Module) and _takes_two_args(module):
        return module
    raise TypeError(
        "Expected an nn.Module with forward(x, blocks) or a list of PyG layers "
        f"(got {type(module).__name__})"
    )


def _takes_two_args(module: nn.Module) -> bool:
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return True  # cannot tell (a C extension): let the first batch decide
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    variadic = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
    return variadic or len(positional) >= 2


def supports_layerwise(model: nn.Module) -> bool:
    """Whether ``model`` offers exact layer-at-a-time inference (``num_layers`` and ``layer_forward``)."""
    inner = getattr(model, "module", model)  # a DDP wrapper
    return isinstance(getattr(inner, "num_layers", None), int) and callable(getattr(inner, "layer_forward", None))


class _MainFinder(pickle.Pickler):
    """Pickles to nowhere and records every class or function that lives in ``__main__``."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.found: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        for candidate in (obj, type(obj)):
            if isinstance(candidate, type) or inspect.isfunction(candidate):
                if getattr(candidate, "__module__", None) == "__main__" and not _from_main_script(candidate):
                    self.found.append(getattr(candidate, "__qualname__", repr(candidate)))
        return NotImplemented


def _from_main_script(obj: Any) -> bool:
    """True when ``obj`` is written in the script file that ``__main__`` runs.

    A ``spawn`` worker re-runs that file as ``__mp_main__`` (the part under
    ``if __name__ == "__main__":`` excepted), so such classes and functions do reach
    it; ones typed into a notebook or REPL, or made at run time, do not.
    """
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if not main_file or not os.path.isfile(main_file):  # REPL, notebook, `python -` / `-c`
        return False
    try:
        source = inspect.getsourcefile(obj)
        if isinstance(obj, type):
            # A class's "file" is its module's; finding its `class` statement in that file
            # proves the script defines it (a class made at run time has none).
            inspect.getsource(obj)
    except (TypeError, OSError):  # made at run time (type(...)), built in, or not in the file
        return False
    return source is not None and os.path.realpath(source) == os.path.realpath(main_file)


class _Sink(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:  # type: ignore[override]
        return len(b)


def check_picklable(model: Union[nn.Module, Callable[..., Any]]) -> None:
    """Raises a clear error if spawned workers could not unpickle ``model`` (or a factory).

    Pickle stores classes and functions by module path; a worker started with ``spawn``
    imports that path. ``__main__`` there is the user's script re-run (fine for what the
    script file defines) but never a notebook's or REPL's namespace.

    Args:
        model: the model instance, or a factory function that builds it.

    Raises:
        ValueError: naming the offending class or function, with what to do.

    Example:
        >>> check_picklable(build_model("gcn", 4, 8, 2))
    """
    finder = _MainFinder(_Sink())  # type: ignore[arg-type]
    try:
        finder.dump(model)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        if finder.found:  # e.g. a class from a notebook cell that __main__ no longer names
            names = ", ".join(sorted(set(finder.found)))
            raise ValueError(f"{names} is defined in __main__, which spawned workers cannot import; {PICKLE_ADVICE}") from exc
        raise ValueError(f"the model cannot be pickled for the worker processes ({exc}); {PICKLE_ADVICE}") from exc
    if finder.found:
        names = ", ".join(sorted(set(finder.found)))
        raise ValueError(
            f"{names} is defined in __main__, which spawned workers cannot import; {PICKLE_ADVICE}"
        )


__all__ = [
    "BlockSequential",
    "MODELS",
    "as_block_model",
    "build_model",
    "check_picklable",
    "supports_layerwise",
]
