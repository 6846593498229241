"""Imports as docs/design.md#layers-and-imports has them: they point one way, no two files import each other,
one place calls torch.distributed."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("graphdist", "partition", "sampling", "placement")

# Modules every layer may import: they import nothing of the project themselves (checked below).
# graphdist/__init__.py exports its public names lazily (graphdist._lazy) and imports nothing else,
# so `from graphdist import comm` adds no cycle; graphdist.plugins holds the hooks that comm and the
# trainers call and that graphdist.testing installs (fault injection, the emulated slow worker);
# graphdist.section is what every component's config section stands on (Section, ConfigError).
FLOOR = {"graphdist", "graphdist._lazy", "graphdist.plugins", "graphdist.section"}

# layer -> layers it may import (besides itself and FLOOR). Every module of the four packages has a
# layer here: a new one gets a row. The rows point down only (the table itself has no cycle, checked
# below), so an import a row does not list is an upward or sideways one, and fails.
# config reads the name registries (models, sync modes, strategies and tasks, partition methods): light
# modules that import no torch, so that --help and config checks stay fast.
ALLOWED = {
    "graphdist": set(),
    "graphdist._lazy": set(),
    "graphdist.plugins": set(),
    "graphdist.section": set(),
    # numba's loader (the compiled loops of sampling and the models): its cache lives under graphdist.data.paths
    "graphdist._numba": {"graphdist.data"},
    "graphdist.comm": set(),
    "graphdist.data": set(),
    "partition": {"graphdist.data"},
    "placement": {"graphdist.data"},
    "sampling": {"partition", "graphdist.comm", "graphdist.data", "graphdist._numba"},
    "graphdist.sync": {"graphdist.comm"},
    "graphdist.models": {"graphdist._numba"},
    "graphdist.interop": {"graphdist.data", "partition"},
    # what each strategy, task and sync mode reads: declared below the config, which checks against it
    "graphdist.options": set(),
    # refusals worded for the CLI or the API, and the refusal of options a run would not read
    "graphdist.refusals": {"graphdist.options", "graphdist.sync"},
    "graphdist.config": {"graphdist.models", "graphdist.sync", "graphdist.options", "graphdist.refusals", "partition",
                         "placement"},
    # the process launcher, checkpoints and the run directory's records: below the trainers
    "graphdist.launch": set(),
    "graphdist.checkpoint": {"graphdist.comm", "graphdist.data"},
    "graphdist.runlog": {"graphdist.checkpoint", "graphdist.data"},
    "graphdist.resume": {"graphdist.checkpoint", "graphdist.config", "graphdist.runlog"},
    # the run directory as one handle (RunDir) over the records runlog writes
    "graphdist.rundir": {"graphdist.checkpoint", "graphdist.runlog"},
    # what a person reads (banner, progress, closing table): the CLI, the launcher and the trainers use it
    "graphdist.console": {"graphdist.runlog"},
    "graphdist.trainers": {"graphdist.sync", "sampling", "graphdist.models", "partition", "placement",
                           "graphdist.comm", "graphdist.data", "graphdist.config", "graphdist.checkpoint",
                           "graphdist.options", "graphdist._numba",
                           "graphdist.launch", "graphdist.runlog", "graphdist.rundir", "graphdist.console"},
    # above the trainers: what a user calls (the Python API, predictions, the CLIs)
    "graphdist.predict": {"graphdist.trainers", "graphdist.comm", "graphdist.config", "graphdist.checkpoint",
                          "graphdist.launch", "graphdist.runlog"},
    "graphdist.api": {"graphdist.trainers", "graphdist.models", "partition", "graphdist.data", "graphdist.config",
                      "graphdist.options", "graphdist.checkpoint", "graphdist.resume", "graphdist.launch",
                      "graphdist.runlog", "graphdist.rundir"},
    # graphdist-plan's profile job: a short local run of the start-up profiler, nothing trained
    "graphdist.planning": {"graphdist.api", "graphdist.trainers", "graphdist.config", "graphdist.data",
                           "graphdist.launch"},
    "graphdist.cli": {"graphdist.api", "graphdist.planning", "graphdist.predict", "graphdist.interop", "graphdist.sync", "partition",
                      "placement", "graphdist.data", "graphdist.config", "graphdist.options", "graphdist.checkpoint",
                      "graphdist.launch", "graphdist.runlog", "graphdist.console"},
    "graphdist.__main__": {"graphdist.cli"},
    # test helpers (tiny graphs, the 2-process launcher) and the test hooks they install through graphdist.plugins:
    # comm and the trainers never import them (a worker installs them by module name when its variable is set)
    "graphdist.testing": {"graphdist.comm", "graphdist.data", "graphdist.launch", "sampling"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "graphdist" and len(parts) > 1 else parts[0]


def _files(root: Path = REPO, packages: tuple[str, ...] = PACKAGES):
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            yield path, module


def _import_graph(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, dict[str, int]]:
    """module -> {project module it imports: the line}, for every file of the four packages.

    Counted as Python runs them: imports inside functions too (only ``if TYPE_CHECKING:`` blocks are
    left out); ``import a.b.c`` imports the deepest of ``a.b.c``, ``a.b``, ``a`` that is a file of the
    project; ``from pkg import name`` imports ``pkg`` (its ``__init__.py``) and ``pkg.name`` where that is
    a module; relative imports resolved. A package is named by its own name (``sampling``: sampling/__init__.py).
    """
    files = dict((module, path) for path, module in _files(root, packages))

    def project(name: str) -> Optional[str]:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for child in node.body for n in ast.walk(child))
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from its package (a package's __init__ is in its own package)
                    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = project(name)
                if target is not None and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _one_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    """A shortest cycle through the first module of ``component``, with the line of each import."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in previous:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in members and w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    path = [start]
    while previous[path[-1]] != start:
        path.append(previous[path[-1]])
    path.append(start)
    path.reverse()
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(path, path[1:])) + f" -> {start}"


def test_no_two_files_import_each_other():
    graph = _import_graph()
    cycles = _cycles(graph)
    assert not cycles, (
        "import cycles (import the sibling module itself, not its package; move what both sides need into a "
        "module both import; docs/design.md#layers-and-imports):\n"
        + "\n".join(f"  {', '.join(c)}\n    e.g. {_one_cycle(graph, c)}" for c in cycles))


def test_the_cycle_check_counts_imports_in_functions_and_through_packages(tmp_path):
    files = {
        "__init__.py": "from pkg.a import f\n",
        # inside a function, through the package: pkg.a imports pkg (its __init__, which imports pkg.a) and pkg.b
        "a.py": "def f():\n    from pkg import b\n    return b\n",
        "b.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:  # not at run time: no edge\n    from pkg.c import C\n",
        "c.py": "from . import a\nimport pkg.b.nothing\n",  # relative; a dotted name imports its deepest module
    }
    (tmp_path / "pkg").mkdir()
    for name, text in files.items():
        (tmp_path / "pkg" / name).write_text(text)
    graph = _import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.a": 1}, "pkg.a": {"pkg": 2, "pkg.b": 2}, "pkg.b": {}, "pkg.c": {"pkg": 1, "pkg.a": 1,
                                                                                                  "pkg.b": 2}}
    assert _cycles(graph) == [["pkg", "pkg.a"]]
    assert _one_cycle(graph, ["pkg", "pkg.a"]) == "pkg (line 1) -> pkg.a (line 2) -> pkg"
    ring = {"a": {"b": 3}, "b": {"c": 10}, "c": {"a": 40}, "d": {"a": 1}, "e": {}}  # d imports into the ring
    assert _cycles(ring) == [["a", "b", "c"]]
    assert _one_cycle(ring, ["a", "b", "c"]) == "a (line 3) -> b (line 10) -> c (line 40) -> a"


def test_layers_import_only_what_they_may():
    wrong = []
    for module, imported in sorted(_import_graph().items()):
        source = _layer(module)
        if source not in ALLOWED:
            wrong.append(f"{module}: its layer {source} has no row in ALLOWED; give it one")
            continue
        for target, line in sorted(imported.items()):
            layer = _layer(target)
            if layer != source and layer not in FLOOR and layer not in ALLOWED[source]:
                wrong.append(f"{module} imports {target} (line {line}); {source} may import "
                             f"{', '.join(sorted(ALLOWED[source])) or 'nothing of the project'}")
    assert not wrong, "imports against docs/design.md#layers-and-imports:\n" + "\n".join(wrong)


def test_the_layer_table_points_down_only():
    assert all(not ALLOWED[floor] for floor in FLOOR), "a floor module imports nothing of the project"
    unknown = {f"{layer} -> {target}" for layer, targets in ALLOWED.items() for target in targets
               if target not in ALLOWED}
    assert not unknown, f"rows name layers that have no row: {sorted(unknown)}"
    graph = {layer: dict.fromkeys(targets, 0) for layer, targets in ALLOWED.items()}
    cycles = _cycles(graph)
    assert not cycles, "layers allowed to import each other (one of them imports upward): " + "; ".join(
        _one_cycle(graph, c) for c in cycles)


def test_only_trainers_import_placement_and_only_comm_touches_torch_distributed():
    wrong = []
    graph = _import_graph()
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
        # placement.options is its config section (the config composes it), not a planner.
        if layer not in ("graphdist.trainers", "placement", "graphdist.testing", "graphdist.cli") and any(
                _layer(m) == "placement" and m != "placement.options" for m in graph[module]):
            wrong.append(f"{module} imports placement")
    assert not wrong, "\n".join(wrong)


def test_no_strategy_imports_another_or_the_loop():
    # The loop (trainers/run.py) knows the Strategy interface only; what strategies share is the kit
    # (trainers/kit.py, trainers/batches.py), never another strategy.
    from graphdist.options import STRATEGIES

    graph = _import_graph()
    strategies = {spec.target.split(":")[0] for spec in STRATEGIES.values()}
    wrong = [f"{module} imports {target} (line {line})" for module in sorted(strategies)
             for target, line in graph[module].items() if target in strategies or target == "graphdist.trainers.run"]
    wrong += [f"graphdist.trainers.run imports {target}" for target in graph["graphdist.trainers.run"] if target in strategies]
    assert not wrong, "\n".join(wrong)
