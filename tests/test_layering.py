"""Imports as docs/design.md#layers-and-imports has them: they point one way, one place calls torch.distributed."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("graphdist", "partition", "sampling", "placement")

# layer -> layers it may import (besides itself, graphdist._lazy, the lazy-export helper, and
# graphdist._numba, which loads numba for the compiled loops of sampling and the models).
# config reads the name registries (models, sync modes, strategies, partition methods): light
# modules that import no torch, so that --help and config checks stay fast.
ALLOWED = {
    "graphdist.comm": set(),
    "graphdist.data": set(),
    "partition": {"graphdist.data"},
    "placement": {"graphdist.data"},
    "sampling": {"partition", "graphdist.comm", "graphdist.data"},
    "graphdist.sync": {"graphdist.comm"},
    "graphdist.models": set(),
    "graphdist.interop": {"graphdist.data", "partition"},
    "graphdist.config": {"graphdist.models", "graphdist.sync", "graphdist.trainers", "partition"},
    "graphdist.trainers": {"graphdist.sync", "sampling", "graphdist.models", "partition", "placement",
                           "graphdist.comm", "graphdist.data", "graphdist.config", "graphdist.checkpoint",
                           "graphdist.launch", "graphdist.runlog", "graphdist.console"},
    # what a person reads (banner, progress, closing table): the CLI, the launcher and the trainers use it
    "graphdist.console": {"graphdist.runlog"},
}
# Single modules a layer may import beyond ALLOWED. The trainer applies the test-only slowdown
# (GRAPHDIST_TEST_SLOWDOWN, a slow worker emulated for the rebalancer's tests and bench), and
# imports it only when that variable is set.
# comm applies the test-only fault points (GRAPHDIST_TEST_FAULT, comm.injection_point), imported only when set.
EXCEPTIONS = {"graphdist.trainers": {"graphdist.testing.slowdown"},
              "graphdist.comm": {"graphdist.testing.faults"}}


def _layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "graphdist" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> set[str]:
    """Project modules ``path`` imports at run time (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "graphdist":  # from graphdist import comm
                out.update(f"graphdist.{a.name}" for a in node.names)
            else:
                out.add(node.module)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def _files():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            yield path, module


def test_layers_import_only_what_they_may():
    wrong = []
    for path, module in _files():
        source = _layer(module)
        if source not in ALLOWED:
            continue
        imported = _imports(path) - EXCEPTIONS.get(source, set())
        for target in {_layer(m) for m in imported} - {source, "graphdist._lazy", "graphdist._numba"}:
            if target not in ALLOWED[source]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against docs/design.md#layers-and-imports:\n" + "\n".join(sorted(wrong))


def test_only_trainers_import_placement_and_only_comm_touches_torch_distributed():
    wrong = []
    for path, module in _files():
        tree_imports = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tree_imports.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                tree_imports.add(node.module)
        layer = _layer(module)
        if layer not in ("graphdist.comm",) and any(m.startswith("torch.distributed") or m == "torch.nn.parallel"
                                                    for m in tree_imports):
            wrong.append(f"{module} imports torch.distributed")
        # graphdist-plan (graphdist.cli.plan) is placement's own tool: it prints plans, trains nothing.
        if layer not in ("graphdist.trainers", "placement", "graphdist.testing", "graphdist.cli") and any(
                m.split(".")[0] == "placement" for m in _imports(path)):
            wrong.append(f"{module} imports placement")
    assert not wrong, "\n".join(wrong)
