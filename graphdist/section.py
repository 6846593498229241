"""A section of the run's config, and the refusal of a setting: the floor every component's options stand on.

``TrainConfig`` (``graphdist.config``) is composed of sections, one per component: the component
declares its options as a frozen ``Section`` and says in :meth:`Section.check` what it accepts
(``graphdist.sync.modes.SyncSection``, ``graphdist.models.registry.ModelSection``,
``placement.options.PlacementSection``, ``partition.edges.LinkSection``, the strategies' in
``graphdist.options``). A refused value is a ``ConfigError``: its parts kept apart (the option,
the constraint, what it got, the hint, the other settings it names), so the CLI words it with
flags and the Python API with keywords, without rewriting text.

Imports nothing of graphdist and no torch: every component's options module may import it.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Cache(Section):
    ...     rows: int = 0
    ...     def check(self) -> None:
    ...         if self.rows < 0:
    ...             raise fail("rows", "must be >= 0", self.rows)
    >>> Cache(rows=-1)
    Traceback (most recent call last):
    ...
    graphdist.section.ConfigError: --rows must be >= 0 (got -1)
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeVar

S = TypeVar("S", bound="Section")


@dataclass(frozen=True)
class Section:
    """A component's options: frozen, validated on construction by :meth:`check`.

    A section's checks read its own fields only; rules that join two sections (``--fanouts``
    against ``--layers`` where the strategy samples) are the config's (``graphdist.config``).
    """

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raises ``ConfigError`` for a value the component cannot run with; the base accepts all."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The section's option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def of(cls: type[S], values: Any) -> S:
        """The section's view of a whole config (or a mapping of option values): what its component reads.

        Example:
            >>> from graphdist.config import TrainConfig
            >>> from graphdist.sync.modes import SyncSection
            >>> SyncSection.of(TrainConfig(sync="ddp")).sync
            'ddp'
        """
        get = values.get if isinstance(values, Mapping) else lambda name: getattr(values, name)
        return cls(**{name: get(name) for name in cls.names()})


class ConfigError(ValueError):
    """A refused option: which one, the constraint it breaks, what it got, and what to do.

    ``str()`` words it for the command line (``--staleness``, ``--strategy fullgraph``);
    :meth:`in_words` for the Python API (``staleness=``, ``strategy='fullgraph'``). The settings a
    constraint or hint mentions are given apart (``mentions``) and put in as ``{0}``, ``{1}``, ...,
    so each surface names them its own way, without rewriting text.

    Example:
        >>> err = ConfigError("staleness", "applies to {0} only", 1, "this run: {1}",
        ...                   mentions=(("strategy", "fullgraph"), ("strategy", "minibatch")))
        >>> str(err)
        '--staleness applies to --strategy fullgraph only (got 1); this run: --strategy minibatch'
        >>> err.in_words("api")
        "staleness= applies to strategy='fullgraph' only (got 1); this run: strategy='minibatch'"
    """

    def __init__(self, field: str, constraint: str, got: Any = None, hint: str = "",
                 mentions: Sequence[tuple[str, Any]] = (), words: str = "cli", at: Any = None) -> None:
        self.field, self.constraint, self.got, self.hint = field, constraint, got, hint
        self.mentions, self.words, self.at = tuple(mentions), words, at
        super().__init__(self._render(words))

    def __reduce__(self) -> tuple[Any, ...]:
        # Copied and pickled (a worker's refusal crosses a pipe) with its parts, not just its message.
        return (_restored, (type(self), self.field, self.constraint, self.got, self.hint, self.mentions, self.words,
                            self.at, self.args))

    def in_words(self, words: str) -> str:
        """The message for the command line (``"cli"``) or the Python API (``"api"``)."""
        return self._render(words)

    def for_api(self) -> "ConfigError":
        """The same refusal (of the same class), worded for the Python API."""
        err = copy.copy(self)
        err.words = "api"
        err.args = (self._render("api"),)
        return err

    def _render(self, words: str) -> str:
        settings = [_setting(name, value, words) for name, value in self.mentions]
        got = "" if self.got is None else f" (got {self.got!r})"
        hint = self.hint.format(*settings)
        head = _option(self.field, words) if self.at is None else _setting(self.field, self.at, words)
        said = self.constraint.format(*settings)
        return f"{head}{'' if said.startswith(':') else ' '}{said}{got}{'; ' + hint if hint else ''}"


def _restored(cls: type, field: str, constraint: str, got: Any, hint: str, mentions: tuple, words: str, at: Any,
              args: tuple) -> ConfigError:
    err = cls(field, constraint, got, hint, mentions, words, at)
    err.args = args
    return err


class ConfigPathError(ConfigError, FileNotFoundError):
    """A refused option that names a file or directory that is not there (a ``FileNotFoundError`` too)."""


def _option(name: str, words: str) -> str:
    return f"{name}=" if words == "api" else f"--{name.replace('_', '-')}"


def _setting(name: str, value: Any, words: str) -> str:
    """``--strategy fullgraph`` / ``strategy='fullgraph'``; the option alone where ``value`` is None."""
    if value is None:
        return _option(name, words)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if words == "api":
        return f"{name}={value!r}"
    if isinstance(value, bool):  # a switch: --overwrite, --no-bind-cores
        return f"--{'' if value else 'no-'}{name.replace('_', '-')}"
    shown = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    return f"--{name.replace('_', '-')} {shown}"


def fail(flag: str, constraint: str, got: Any, hint: str = "", *mentions: tuple[str, Any]) -> ConfigError:
    """A refusal of ``flag``; other settings the words name go in ``mentions`` (``{0}``, ``{1}``, ...)."""
    return ConfigError(flag.replace("-", "_"), constraint, got, hint, mentions=mentions)


def check_choices(*options: tuple[str, Any, Any]) -> None:
    """Refuses the first ``(flag, value, choices)`` whose value is not one of its choices, listing them.

    Example:
        >>> check_choices(("sync", "dwbp", ("dwbp", "ddp")), ("sacp", "maybe", ("on", "off")))
        Traceback (most recent call last):
        ...
        graphdist.section.ConfigError: --sacp must be one of on, off (got 'maybe')
    """
    for flag, value, choices in options:
        if value not in choices:
            raise fail(flag, f"must be one of {', '.join(choices)}", value)


def fail_at(flag: str, value: Any, says: str, *mentions: tuple[str, Any], error: type = ConfigError) -> ConfigError:
    """A refusal of ``flag``'s ``value``, named first: ``--partitions DIR: no such directory ...``.

    Example:
        >>> err = fail_at("resume", "runs/a", "no checkpoint there; start it anew without {0}", ("resume", None))
        >>> str(err), err.in_words("api")
        ('--resume runs/a: no checkpoint there; start it anew without --resume', \
"resume='runs/a': no checkpoint there; start it anew without resume=")
    """
    return error(flag.replace("-", "_"), ": " + says, mentions=mentions, at=value)


__all__ = ["ConfigError", "ConfigPathError", "Section", "check_choices", "fail", "fail_at"]
