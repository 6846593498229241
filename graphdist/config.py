"""``TrainConfig``: the one resolved, validated, frozen description of a training run.

It is composed of sections, one per component, each validated by the component it configures
(``graphdist.section.Section``): data, model (``graphdist.models.registry``), optimisation, sync
(``graphdist.sync.modes``), full graph and aggregation (their strategies, ``graphdist.options``),
placement (``placement.options``), link prediction (``partition.edges``) and runtime. The options
keep one flat name each (``cfg.staleness``, ``--staleness``, ``GRAPHDIST_STALENESS``, a
``config.yaml`` key); ``SECTIONS`` says which section holds each, and ``Section.of(cfg)`` is a
component's view of its own. The rules that join two sections are :func:`check_across`.

Precedence: CLI flag > ``GRAPHDIST_<FIELD>`` environment variable > ``--config``
YAML file > the default here. Each field's comment says why it has its default.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from graphdist.models.registry import DECODERS, MODELS, ModelSection  # noqa: F401 - the CLI
from graphdist.options import SAMPLE_ON, SAMPLERS, STRATEGIES, TASKS, AggregationSection, FullGraphSection
from graphdist.refusals import (  # noqa: F401 - re-exported
    ConfigError, check_cluster, check_link, check_sample_on, read_options, refuse_inapplicable, scoped)
from graphdist.section import Section, check_choices
from graphdist.section import fail as _fail
from graphdist.sync.modes import (ALLREDUCE_MODES, COMPRESS_MODES, COMPRESSIONS, SACP_MODES,  # noqa: F401 - the CLI
                                  SYNC_MODES, SyncSection, parse_sacp_overrides)
from partition.edges import NEGATIVES, LinkSection  # noqa: F401 - the CLI
from partition.methods import METHODS as PARTITION_METHODS
from placement.options import PLACEMENTS, REPLICATE, PlacementSection  # noqa: F401 - re-exported

# The choices of each option are declared once, where the implementations register (none of
# these imports torch); only these live here, as they are the config's own sections'.
FEATURE_NORMS = ("none", "row")
PRECISIONS = ("fp32", "bf16", "fp16")  # graphdist.trainers.precision says what each computes in
DEFAULT_NUM_WORKERS = 2
DEFAULT_DATASET = "synthetic-100k"
CHECKPOINTS = ("best", "last")


@dataclass(frozen=True)
class DataSection(Section):
    """What is trained on, and for which task."""

    # None: the partition directory's own dataset with --partitions, else DEFAULT_DATASET (generated, no
    # download: the quickstart works offline, ~1 min). The run directory records the one trained on.
    dataset: Optional[str] = None
    partitions: Optional[str] = None  # an existing partition directory (its meta.json names its dataset)
    partition_method: str = "metis"  # lowest edge cut: least remote traffic for minibatch
    # Node classification (single or multi-label, as the data's y has it) or link prediction; a partition
    # directory is made for one of them (link: held-out edges removed from the message-passing graph).
    task: str = "node"
    feature_norm: str = "none"  # "row": divide each feature row by its L1 norm (its sum for non-negative features: Planetoid's usual preprocessing)

    def check(self) -> None:
        check_choices(("task", self.task, TASKS), ("feature-norm", self.feature_norm, FEATURE_NORMS),
                      ("partition-method", self.partition_method, PARTITION_METHODS))


@dataclass(frozen=True)
class OptimSection(Section):
    """The optimisation: batch, epochs, learning rate, numeric precision."""

    batch_size: int = 512  # per step, across all workers (split by batch share)
    epochs: int = 5
    max_steps: int = 0  # steps per epoch cap (0 = a full pass over the train nodes): benchmarks, smoke runs
    lr: float = 0.005
    weight_decay: float = 0.0
    # "bf16": the training forward's dense products in bfloat16 on float32 parameters (mixed precision,
    # no loss scaling): products 1.2-2.3x faster on CPUs with AVX512_BF16/AMX. "fp16": float16 with
    # dynamic loss scaling, for GPUs without bfloat16 (V100, T4). Off by default: exact float32.
    precision: str = "fp32"

    def check(self) -> None:
        if self.precision not in PRECISIONS:
            raise _fail("precision", f"must be one of {', '.join(PRECISIONS)}", self.precision)
        for name in ("batch_size", "epochs"):
            if getattr(self, name) < 1:
                raise _fail(name, "must be >= 1", getattr(self, name))
        if self.lr <= 0:
            raise _fail("lr", "must be > 0", self.lr)


@dataclass(frozen=True)
class RuntimeSection(Section):
    """The job: its workers and devices, the sampler's runtime, logging, the run directory."""

    strategy: str = "minibatch"
    num_workers: int = DEFAULT_NUM_WORKERS
    devices: tuple[str, ...] = ("cpu",)  # one entry for all workers, or one per worker
    threads: int = 1  # torch threads per worker: N workers x 1 thread fill N cores
    seed: int = 0
    timeout: float = 180.0  # seconds before a collective fails instead of hanging
    # seconds a peer's heartbeat may stay still before this rank ends, naming it (a host that died silently,
    # a stopped process), so torchrun can form the job again without waiting out --timeout; 0: never
    peer_timeout: float = 10.0
    # Remote-feature cache rows per worker, by the probability a batch reads them (sampling/inclusion.py):
    # -1 every remote node a batch may read within 512 MiB (sampling.dist_features' AUTO_CACHE_MIB: all of
    # them on small graphs, a bounded cache on large ones), 0 none, n the n likeliest.
    cache_rows: int = -1
    # "neighbor": --fanouts neighbours of each seed, across parts; "cluster": ClusterGCN batches of the
    # worker's own part (trainers/samplers.py), nothing fetched from peers while training
    sampler: str = "neighbor"
    # None = auto: prefetch in a background thread when the worker's batches wait on other ranks
    # (its sampling overlaps their replies even on one core) or it may use a core beyond its compute
    # threads; a local-only sampler on a single core only steals time from the step it overlaps.
    prefetch: Optional[bool] = None
    loaders: Optional[int] = None  # loader processes per worker (sampling/loader_procs.py); None: kit.loader_count
    sample_on: str = "auto"  # where batches are sampled: auto, cpu, device (graphdist/trainers/device_sampling.py)
    # None = auto: bind each of a machine's 2+ workers to its own cores when their threads fill
    # its cores exactly (graphdist.launch.worker_cores); True whenever they fit (an error where
    # they do not); False never.
    bind_cores: Optional[bool] = None
    eval_every: int = 1  # 0 = never evaluate (throughput benchmarks)
    checkpoint_every: int = 1  # epochs between checkpoints (the last epoch always); full-graph epochs are one step
    # checkpoints inside an epoch every so many steps or seconds ("500steps", "30s"; --strategy minibatch): a
    # resume, on any worker count, trains the epoch's remaining seeds once; None: epoch ends only
    checkpoint_interval: Optional[str] = None
    log_interval: int = 20  # steps between progress lines (and between reads of the loss: a read syncs a GPU)
    verbose: bool = False  # the console's diagnostics: resolved config, topology and plan, sync wiring, cores
    tensorboard: bool = False  # off: tensorboard is an optional package; metrics.jsonl is always written
    # rank 0 draws the run directory's PNGs after the last epoch (matplotlib: about 1.2 s of CPU, import included)
    plots: bool = True
    run_dir: Optional[str] = None  # default runs/<timestamp>
    resume: Optional[str] = None
    predict: Optional[str] = None
    checkpoint: str = "best"  # what --predict loads: best (the best-validation epoch's model) or last
    dry_run: bool = False
    # A new run into a --run-dir that holds a run's record (checkpoint, metrics) moves that record aside to
    # RUN.old-<time> instead of being refused; never saved in config.yaml (a resume must not move its own run)
    overwrite: bool = False
    # Continue a run that cannot resume bit for bit (graphdist.resume.INEXACT_ON_RESUME: --avg-seconds) from its
    # checkpoint anyway; without it such a resume is refused, naming why
    inexact_resume: bool = False

    def check(self) -> None:
        check_choices(("strategy", self.strategy, STRATEGIES), ("checkpoint", self.checkpoint, CHECKPOINTS),
                      ("sampler", self.sampler, SAMPLERS), ("sample-on", self.sample_on, SAMPLE_ON))
        if self.checkpoint_interval is not None:
            checkpoint_interval(self.checkpoint_interval)  # refused here, naming the flag
        for name in ("num_workers", "threads", "log_interval", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise _fail(name, "must be >= 1", getattr(self, name))
        if self.loaders is not None and self.loaders < 0:
            raise _fail("loaders", "must be 0 (the prefetch thread) or a count of loader processes", self.loaders)
        if self.cache_rows < -1:
            raise _fail("cache-rows", "must be -1 (every halo node), 0 (no cache) or a row count", self.cache_rows)
        if self.timeout <= 0:
            raise _fail("timeout", "must be > 0 seconds", self.timeout)
        if self.peer_timeout < 0:
            raise _fail("peer_timeout", "must be >= 0 seconds (0: off)", self.peer_timeout)
        if self.overwrite and (self.resume or self.predict):
            raise _fail("overwrite", "starts a new run: it cannot go with {0} or {1}", True,
                        "drop it to continue the run, or drop {0} to start anew", ("resume", "RUN"), ("predict", "RUN"))
        if len(self.devices) not in (1, self.num_workers):
            raise _fail("devices", f"needs 1 entry or one per worker ({self.num_workers})", ",".join(self.devices),
                        "e.g. {0} or {1}", ("devices", "cpu"), ("devices", "cpu,cuda:0"))
        for dev in self.devices:
            if dev != "cpu" and not (dev == "cuda" or dev.startswith("cuda:") and dev[5:].isdigit()):
                raise _fail("devices", "entries must be cpu, cuda or cuda:<i>", dev)


# section name -> the section. In this order: the saved config.yaml lists the options so.
SECTIONS: dict[str, type[Section]] = {
    "data": DataSection, "model": ModelSection, "optimisation": OptimSection, "sync": SyncSection,
    "fullgraph": FullGraphSection, "aggregation": AggregationSection, "placement": PlacementSection,
    "link": LinkSection, "runtime": RuntimeSection,
}


@dataclass(frozen=True)
class TrainConfig(RuntimeSection, LinkSection, PlacementSection, AggregationSection, FullGraphSection, SyncSection,
                  OptimSection, ModelSection, DataSection):
    """Everything a training run needs: the sections' options under their flat names; validated on construction.

    Example:
        >>> TrainConfig(layers=2, fanouts=(10, 5)).fanouts
        (10, 5)
        >>> SyncSection.of(TrainConfig(sync="ddp")).sync
        'ddp'
    """

    def check(self) -> None:
        for section in SECTIONS.values():
            section.check(self)  # each section's own rules, on its fields of this config
        check_across(self)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fanouts"] = list(self.fanouts)
        d["edge_split"] = list(self.edge_split)
        d["devices"] = list(self.devices)
        return d

    @property
    def source(self) -> str:
        """The dataset to load or partition: ``dataset``, else the default generated graph."""
        return self.dataset or DEFAULT_DATASET

    def device_of(self, rank: int) -> str:
        return self.devices[0] if len(self.devices) == 1 else self.devices[rank]


def checkpoint_interval(value: Optional[str]) -> tuple[int, float]:
    """``--checkpoint-interval`` as ``(steps, seconds)``, one of them 0: ``"500steps"`` (or ``"500"``), or ``"30s"``;
    None: ``(0, 0.0)`` (off).

    Example:
        >>> checkpoint_interval("500steps"), checkpoint_interval("20"), checkpoint_interval("30s")
        ((500, 0.0), (20, 0.0), (0, 30.0))
    """
    if value is None:
        return 0, 0.0
    steps = re.fullmatch(r"\s*(\d+)\s*(steps?)?\s*", str(value))
    seconds = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*s\s*", str(value))
    if steps and int(steps.group(1)) >= 1:
        return int(steps.group(1)), 0.0
    if seconds and float(seconds.group(1)) > 0:
        return 0, float(seconds.group(1))
    raise _fail("checkpoint_interval", "must be a number of steps or seconds > 0, e.g. 500steps or 30s", value)


def section_of(name: str) -> str:
    """The section that holds option ``name``.

    Example:
        >>> section_of("staleness"), section_of("lr")
        ('fullgraph', 'optimisation')
    """
    return next(title for title, section in SECTIONS.items() if name in section.names())


def check_across(cfg: TrainConfig) -> None:
    """The rules that join two sections: what a strategy, a task or the devices make of other options."""
    if "fanouts" in STRATEGIES[cfg.strategy].reads and len(cfg.fanouts) != cfg.layers:
        example = tuple((15, 10, 5, 5, 5, 5)[: cfg.layers])
        raise _fail("fanouts", f"has {len(cfg.fanouts)} entries but {{0}} is {cfg.layers}", None,
                    "give one fan-out per layer, e.g. {1}", ("layers", None), ("fanouts", example))
    for name, unset, why in (("replicate", "none", ""),
                             ("rebalance_every", 0, " (other strategies have no batch shares to move)")):
        if getattr(cfg, name) != unset and name not in STRATEGIES[cfg.strategy].reads:
            readers = [s for s, spec in STRATEGIES.items() if name in spec.reads]
            raise _fail(name, "applies to " + " or ".join(f"{{{i}}}" for i in range(len(readers))) + f" only{why}",
                        getattr(cfg, name), "", *(("strategy", s) for s in readers))
    compression = COMPRESSIONS.get(cfg.compress)
    if (compression and compression.ddp_needs_gpu and SYNC_MODES[cfg.sync].owns_allreduce
            and not all(d.startswith("cuda") for d in cfg.devices)):
        cpu_able = [name for name, c in COMPRESSIONS.items() if c.cast and c.ddp_wrapper and not c.ddp_needs_gpu]
        raise _fail("compress", f"{cfg.compress} under {{0}} is torch's {compression.ddp_wrapper} hook, which needs "
                    "NCCL: every worker on a GPU", cfg.compress, "on CPUs use {1} (graphdist's own cast) or {2}",
                    ("sync", cfg.sync), ("sync", "dwbp"), *(("compress", name) for name in cpu_able[:1]))
    if cfg.sample_on == "device" and "sample_on" in STRATEGIES[cfg.strategy].reads:
        check_sample_on(cfg)
    if cfg.task == "link":
        check_link(cfg)
    if cfg.sampler == "cluster":
        check_cluster(cfg)


# ----------------------------------------------------------------- resolution

FIELD_NAMES = tuple(f.name for f in fields(TrainConfig))


_TYPE_WORDS = {"int": "an integer", "Optional[int]": "an integer", "float": "a number", "Optional[float]": "a number",
               "bool": "true or false (1/0, yes/no, on/off)", "Optional[bool]": "true or false (1/0, yes/no, on/off)"}


def _coerce(name: str, value: Any, source: Optional[str] = None) -> Any:
    """Turns a string / YAML value into the field's type; errors name ``source`` (default the flag).

    Example:
        >>> _coerce("epochs", "abc", source="GRAPHDIST_EPOCHS")
        Traceback (most recent call last):
        ...
        ValueError: GRAPHDIST_EPOCHS must be an integer (got 'abc')
    """
    f = next(f for f in fields(TrainConfig) if f.name == name)
    typ = str(f.type)
    if value is None:
        if typ.startswith("Optional["):
            return None
        raise ValueError(f"{source or '--' + name.replace('_', '-')} has no value (YAML null); give one or "
                         f"leave the key out for the default")
    if name in ("fanouts", "devices", "edge_split"):
        if isinstance(value, str):
            items = value.split(",")
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:  # a YAML scalar: one layer's fan-out, one device
            items = [value]
        items = [str(i).strip() for i in items if str(i).strip()]
        numbers = {"fanouts": (int, "comma-separated integers, e.g. 15,10,5"),
                   "edge_split": (float, "three comma-separated shares, e.g. 0.85,0.05,0.10")}
        if name in numbers:
            kind, words = numbers[name]
            try:
                return tuple(kind(i) for i in items)
            except ValueError:
                raise ValueError(f"{source or '--' + name.replace('_', '-')} must be {words} (got {value!r})") from None
        return tuple(items)
    try:
        if typ in ("int", "Optional[int]"):
            return int(value)
        if typ in ("float", "Optional[float]"):
            return float(value)
        if typ in ("bool", "Optional[bool]"):
            if isinstance(value, str):
                word = value.strip().lower()
                if word in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                    return word in ("1", "true", "yes", "on")
                raise ValueError(value)  # worded below
            return bool(value)
    except (TypeError, ValueError):
        where = source or f"--{name.replace('_', '-')}"
        raise ValueError(f"{where} must be {_TYPE_WORDS.get(typ, typ)} (got {value!r})") from None
    return str(value)


def load_config_file(path: str) -> dict[str, Any]:
    """Reads a YAML config; keys are field names (dashes or underscores).

    Raises:
        ValueError: naming an unknown key and listing the known ones.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--config: no such file {path!r}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path}: not valid YAML ({yaml_problem(exc)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of option: value (got {type(data).__name__})")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELD_NAMES:
            raise ValueError(f"--config {path}: unknown key {key!r}{did_you_mean(name, FIELD_NAMES)}")
        out[name] = _coerce(name, value, source=f"--config {path}: {key}")
    return out


def yaml_problem(exc: Exception) -> str:
    """A YAML error in one line: where, and what (PyYAML's own message spans several lines).

    Example:
        >>> import yaml
        >>> try:
        ...     yaml.safe_load("epochs: 2\\nlr: [0.1\\n")
        ... except yaml.YAMLError as exc:
        ...     yaml_problem(exc)
        "line 3, column 1: expected ',' or ']', but got '<stream end>'"
    """
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """``; did you mean 'lr'?`` for a near miss, else the list of known keys (dashed).

    Example:
        >>> did_you_mean("learning_rat", ("lr", "learning_rate"))
        "; did you mean 'learning-rate'?"
    """
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0].replace('_', '-')!r}?"
    return f"; known keys: {', '.join(k.replace('_', '-') for k in known)}"


def env_overrides(environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """``GRAPHDIST_<FIELD>`` variables (e.g. ``GRAPHDIST_NUM_WORKERS=4``) as field values."""
    env = os.environ if environ is None else environ
    out = {}
    for name in FIELD_NAMES:
        key = f"GRAPHDIST_{name.upper()}"
        if key in env:
            out[name] = _coerce(name, env[key], source=key)
    return out


def resolve(
    cli: Mapping[str, Any],
    config_file: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
    base: Optional[Mapping[str, Any]] = None,
) -> TrainConfig:
    """Merges default < ``base`` < config file < environment < CLI into a validated ``TrainConfig``.

    ``base`` is a resumed run's saved config: everything given now still overrides it.

    Example:
        >>> resolve({"epochs": 3}, environ={}).epochs
        3
        >>> resolve({}, environ={"GRAPHDIST_LR": "0.1"}, base={"lr": 0.01, "epochs": 7}).lr
        0.1
    """
    return resolve_with_origin(cli, config_file, environ, base)[0]


def resolve_with_origin(
    cli: Mapping[str, Any],
    config_file: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
    base: Optional[Mapping[str, Any]] = None,
) -> tuple[TrainConfig, dict[str, str]]:
    """:func:`resolve`, and where each setting not given as a flag came from (for later messages).

    Example:
        >>> resolve_with_origin({"epochs": 3}, environ={"GRAPHDIST_LR": "0.1"})[1]
        {'lr': 'GRAPHDIST_LR'}
    """
    values, origin = _merge(cli, config_file, environ, base)
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    # Given: named as a flag or a variable, or a config-file key away from the default (a resumed run's
    # own config.yaml gives nothing: it is the run being continued).
    given = set(cli) | {k for k, where in origin.items()
                        if where.startswith("GRAPHDIST_") or (where.startswith("--config") and values[k] != defaults[k])}
    try:
        cfg = TrainConfig(**values)
        refuse_inapplicable(cfg, given)
        return cfg, origin
    except ConfigError as exc:
        told = copy.copy(exc)
        told.args = (with_origin(exc, origin),)
        raise told from None


def _merge(
    cli: Mapping[str, Any],
    config_file: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
    base: Optional[Mapping[str, Any]] = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The merged field values, and where each one not given as a flag came from (for messages).

    Example:
        >>> _merge({"epochs": 3}, environ={"GRAPHDIST_LR": "0.1"})
        ({'lr': 0.1, 'epochs': 3}, {'lr': 'GRAPHDIST_LR'})
    """
    values: dict[str, Any] = {k: _coerce(k, v, source="the saved config") for k, v in (base or {}).items()
                              if k in FIELD_NAMES and k not in ("resume", "predict", "dry_run", "overwrite")}
    origin = {k: "the resumed run's config.yaml" for k in values}
    if config_file:
        from_file = load_config_file(config_file)
        values.update(from_file)
        origin.update({k: f"--config {config_file}: {k}" for k in from_file})
    from_env = env_overrides(environ)
    values.update(from_env)
    origin.update({k: f"GRAPHDIST_{k.upper()}" for k in from_env})
    given = {k: _coerce(k, v) for k, v in cli.items() if v is not None}
    values.update(given)
    for k in given:
        origin.pop(k, None)
    if "layers" in values and "fanouts" not in values:
        # The default fan-outs fit the default depth only: derive a matching list.
        values["fanouts"] = tuple((15, 10, 5, 5, 5, 5, 5, 5)[: int(values["layers"])])
    if "num_workers" not in values and len(values.get("devices", ())) > 1:
        # One device per worker says how many workers there are (under torchrun, before WORLD_SIZE is read).
        values["num_workers"] = len(values["devices"])
    return values, origin


def with_origin(exc: BaseException, origin: Mapping[str, str]) -> str:
    """A refusal's message, prefixed by where the options it names came from, where not from a flag.

    Example:
        >>> err = ConfigError("avg_every", "must be >= 1 step", 0)
        >>> with_origin(err, {"avg_every": "GRAPHDIST_AVG_EVERY"})
        'GRAPHDIST_AVG_EVERY: --avg-every must be >= 1 step (got 0)'
    """
    message = str(exc)
    if not isinstance(exc, ConfigError):
        return message  # worded where it was raised (a value's source names itself)
    named: list[str] = []
    for name in (exc.field, *(name for name, _ in exc.mentions)):
        where = origin.get(name)
        if where and where not in named and where not in message:
            named.append(where)
    return f"{', '.join(named)}: {message}" if named else message


def replace(cfg: TrainConfig, **changes: Any) -> TrainConfig:
    return dataclasses.replace(cfg, **changes)


__all__ = ["DEFAULT_DATASET", "SECTIONS", "DataSection", "OptimSection", "RuntimeSection", "TrainConfig", "check_across",
           "env_overrides", "load_config_file", "replace", "resolve", "resolve_with_origin", "section_of", "with_origin"]
