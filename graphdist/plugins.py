"""Plug-in points: named hooks that comm and the trainers call and that someone above them installs.

Three hooks exist, the first two for tests and benches:

- ``fault``: ``hook(point, rank)``, called at every named injection point (``comm.injection_point``:
  ``startup``, ``allreduce``, ``exchange:<tag>``, ``checkpoint``, ``evaluate``). It may kill the process.
- ``slowdown``: ``hook(rank) -> stretch or None``, asked once by the minibatch trainer: a stretch makes
  this rank's own work slower (its methods: ``set_epoch``, ``mark``, ``tick``, ``attach(model)``,
  ``wrap_sampler(sampler)``, and the ``slept_s``/``spun_s`` counters).
- ``before_exit``: ``hook()``, called by a process about to end at once, without its interpreter's
  teardown (comm's peer watch): the checkpoint writer (``graphdist.checkpoint``) installs it while a
  write is in flight, and finishes that write.

By default none is installed and a call costs one dictionary lookup. ``graphdist.testing`` holds
the implementations (``graphdist.testing.faults``, ``graphdist.testing.slowdown``) and installs
them; comm and the trainers call the hook and never import the test helpers.

The hooks are switched on by environment variables, so that spawned, forked and torchrun workers
get them: :func:`load_plugins_from_environment`, called by every worker on entry
(``graphdist.trainers.run.worker_main``; the test launcher's children, ``graphdist.testing.launch``),
imports the module that owns each variable that is set (``ENVIRONMENT_PLUGINS``) by its name, with
``importlib``, and calls its ``install()``. The names are data, not imports: this module imports
nothing of graphdist (every layer may import it), and no layer that calls a hook depends on the one
that installs it.

Example:
    >>> def show(point, rank):
    ...     print("passed", point, "on rank", rank)
    >>> previous = install("fault", show)
    >>> call("fault", "startup", 0)
    passed startup on rank 0
    >>> _ = install("fault", previous)  # back as it was (None: nothing installed)
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Mapping, Optional

HOOKS = ("fault", "slowdown", "before_exit")

# variable -> the module that implements what it asks for; its install() puts the hooks in place.
ENVIRONMENT_PLUGINS = {
    "GRAPHDIST_TEST_FAULT": "graphdist.testing.faults",
    "GRAPHDIST_TEST_SLOWDOWN": "graphdist.testing.slowdown",
}

_installed: dict[str, Callable[..., Any]] = {}


def install(name: str, fn: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    """Installs ``fn`` as hook ``name`` (None removes it); returns the hook it replaces (or None).

    Raises:
        ValueError: ``name`` is not one of ``HOOKS``.
    """
    if name not in HOOKS:
        raise ValueError(f"Expected a hook name in {HOOKS} (got {name!r})")
    previous = _installed.pop(name, None)
    if fn is not None:
        _installed[name] = fn
    return previous


def hook(name: str) -> Optional[Callable[..., Any]]:
    """The hook installed as ``name``, or None."""
    return _installed.get(name)


def call(name: str, *args: Any) -> Any:
    """Calls hook ``name`` with ``args`` and returns what it returns; None when none is installed."""
    fn = _installed.get(name)
    return fn(*args) if fn is not None else None


def load_plugins_from_environment(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """Installs the hooks that the environment asks for: for each variable of ``ENVIRONMENT_PLUGINS``
    that is set, imports its module and calls its ``install()``. Idempotent; cheap when none is set.

    Args:
        environ: the variables to read (default ``os.environ``).

    Returns:
        The modules whose hooks are installed.

    Example:
        >>> load_plugins_from_environment({})
        []
    """
    env = os.environ if environ is None else environ
    modules = [module for var, module in ENVIRONMENT_PLUGINS.items() if env.get(var)]
    for module in modules:
        importlib.import_module(module).install()
    return modules


__all__ = ["ENVIRONMENT_PLUGINS", "HOOKS", "call", "hook", "install", "load_plugins_from_environment"]
