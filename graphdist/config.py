"""``TrainConfig``: the one resolved, validated, frozen description of a training run.

Precedence: CLI flag > ``GRAPHDIST_<FIELD>`` environment variable > ``--config``
YAML file > the default here. Each field's comment says why it has its default.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from graphdist.models.registry import DECODERS, MODELS
from graphdist.sync.modes import (ALLREDUCE_MODES, COMPRESS_MODES, SACP_MODES, SYNC_MODES,  # noqa: F401 - the CLI
                                  parse_sacp_overrides)
from graphdist.options import STRATEGIES, TASKS
from graphdist.refusals import ConfigError, read_options, refuse_inapplicable, scoped  # noqa: F401 - re-exported
from graphdist.refusals import fail as _fail
from partition.edges import NEGATIVES, check_fractions
from partition.methods import METHODS as PARTITION_METHODS

# The choices of each option are declared once, where the implementations register (none of
# these imports torch); only --feature-norm's live here, as they are a config matter.
FEATURE_NORMS = ("none", "row")
PRECISIONS = ("fp32", "bf16", "fp16")  # graphdist.trainers.precision says what each computes in
REPLICATE = ("none", "structure", "graph")
PLACEMENTS = ("auto", "profiled", "equal")
DEFAULT_NUM_WORKERS = 2
DEFAULT_DATASET = "synthetic-100k"
CHECKPOINTS = ("best", "last")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; validated on construction.

    Example:
        >>> TrainConfig(layers=2, fanouts=(10, 5)).fanouts
        (10, 5)
    """

    # --- Data
    # None: the partition directory's own dataset with --partitions, else DEFAULT_DATASET (generated, no
    # download: the quickstart works offline, ~1 min). The run directory records the one trained on.
    dataset: Optional[str] = None
    partitions: Optional[str] = None  # an existing partition directory (its meta.json names its dataset)
    partition_method: str = "metis"  # lowest edge cut: least remote traffic for minibatch
    # Node classification (single or multi-label, as the data's y has it) or link prediction; a partition
    # directory is made for one of them (link: held-out edges removed from the message-passing graph).
    task: str = "node"
    # --- Link prediction (--task link)
    edge_split: tuple[float, ...] = (0.85, 0.05, 0.10)  # train, val, test edges: the PyG/OGB examples' split
    eval_negatives: int = 100  # stored negatives per held-out edge: MRR and Hits@10 need a few dozen at least
    num_negatives: int = 1  # negatives per positive edge in training (PyG's and DGL's examples use 1)
    neg_sampling: str = "uniform"  # "degree": negatives drawn ~ degree^0.75 (harder, closer to evaluation on hubs)
    decoder: str = "mlp"  # h_u * h_v through a 2-layer MLP: 0.92-0.93 test AUC on cora in 5 epochs, dot 0.89
    hits_k: int = 10  # Hits@K of the held-out edges against their stored negatives
    # --- Model
    model: str = "sage"
    hidden: int = 128  # wide enough for the datasets here; small enough for 2 CPU cores
    layers: int = 2
    fanouts: tuple[int, ...] = (10, 5)  # from the seeds outward; one per layer; -1 = all
    dropout: float = 0.5
    heads: int = 4  # GAT only
    feature_norm: str = "none"  # "row": divide each feature row by its L1 norm (its sum for non-negative features: Planetoid's usual preprocessing)
    # --- Optimisation
    batch_size: int = 512  # per step, across all workers (split by batch share)
    epochs: int = 5
    max_steps: int = 0  # steps per epoch cap (0 = a full pass over the train nodes): benchmarks, smoke runs
    lr: float = 0.005
    weight_decay: float = 0.0
    # "bf16": the training forward's dense products in bfloat16 on float32 parameters (mixed precision,
    # no loss scaling): products 1.2-2.3x faster on CPUs with AVX512_BF16/AMX. "fp16": float16 with
    # dynamic loss scaling, for GPUs without bfloat16 (V100, T4). Off by default: exact float32.
    precision: str = "fp32"
    # --- Sync
    strategy: str = "minibatch"
    sync: str = "dwbp"  # wait-free layer-wise; ddp and blocking are comparison points
    # ring on one host or NCCL (nothing to gain); across hosts the fastest of ring, hd and hier,
    # timed once at start on the largest layer's gradient
    allreduce: str = "auto"
    compress: str = "none"  # exact by default; fp16/bf16/int8 trade accuracy for bytes on slow links
    sacp: str = "auto"  # exact either way; sufficient factors only where they send fewer bytes
    sacp_override: Optional[str] = None  # "LAYER=dense|sfb,...": force a scheme per layer (debugging)
    # --- Full graph (--strategy fullgraph)
    staleness: int = 0  # 0: exact halo exchange; 1: wait-free, halo embeddings/gradients one step stale
    smoothing: float = 0.0  # PipeGCN's g for stale buffers: h <- g*h_old + (1-g)*h_new (0: none)
    boundary_sample: float = 1.0  # BNS-GCN: share of boundary nodes kept each epoch (1: all, exact)
    max_memory: Optional[float] = None  # GiB per worker for the memory check; None: machine memory / local workers
    # --- Model aggregation (--strategy aggregation)
    avg_every: int = 10  # steps between parameter averages (and always at the end of an epoch)
    avg_seconds: Optional[float] = None  # average every T seconds instead (ranks agree on the step)
    avg_optimizer: bool = False  # average Adam's moments too (default: optimizer state stays local)
    # Land each mid-epoch average one step late, its all-reduce hidden behind that step (off: the
    # plain synchronous averaging the accuracy figures were first measured with)
    avg_overlap: bool = False
    correction_steps: int = 0  # LLCG: global mini-batch steps after each average (0: plain averaging)
    # --- Placement
    cluster: Optional[str] = None  # a cluster spec (YAML): per worker its device, threads, memory, speed
    placement: str = "auto"  # start shares: "profiled" (probe steps), "equal" (by train nodes), "auto" (profiled
    # when the workers' devices differ; equal, and deterministic, when they are alike)
    rebalance_every: int = 0  # steps between share rebalancing from measured busy times (0: fixed shares)
    rebalance_eps: float = 0.05  # tolerated imbalance of predicted busy times (max/min - 1)
    # --- System
    num_workers: int = DEFAULT_NUM_WORKERS
    devices: tuple[str, ...] = ("cpu",)  # one entry for all workers, or one per worker
    threads: int = 1  # torch threads per worker: N workers x 1 thread fill N cores
    seed: int = 0
    timeout: float = 180.0  # seconds before a collective fails instead of hanging
    # What every worker holds beyond its part: "none"; "structure" (the whole CSR: sampling is
    # local, features stay partitioned); "graph" (CSR and features: data-parallel, no exchange but
    # gradients). Needs the graph to fit each worker; lets the rebalancer move all of a seed's work.
    replicate: str = "none"
    # Remote-feature cache rows per worker, by the probability a batch reads them (sampling/inclusion.py):
    # -1 every remote node a batch may read within 512 MiB (sampling.dist_features' AUTO_CACHE_MIB: all of
    # them on small graphs, a bounded cache on large ones), 0 none, n the n likeliest.
    cache_rows: int = -1
    # None = auto: prefetch in a background thread when the worker's batches wait on other ranks
    # (its sampling overlaps their replies even on one core) or it may use a core beyond its compute
    # threads; a local-only sampler on a single core only steals time from the step it overlaps.
    prefetch: Optional[bool] = None
    # None = auto: bind each of a machine's 2+ workers to its own cores when their threads fill
    # its cores exactly (graphdist.launch.worker_cores); True whenever they fit (an error where
    # they do not); False never.
    bind_cores: Optional[bool] = None
    eval_every: int = 1  # 0 = never evaluate (throughput benchmarks)
    checkpoint_every: int = 1  # epochs between checkpoints (the last epoch always); full-graph epochs are one step
    log_interval: int = 20  # steps between progress lines (and between reads of the loss: a read syncs a GPU)
    verbose: bool = False  # the console's diagnostics: resolved config, topology and plan, sync wiring, cores
    tensorboard: bool = False  # off: tensorboard is an optional package; metrics.jsonl and the plots are always written
    run_dir: Optional[str] = None  # default runs/<timestamp>
    resume: Optional[str] = None
    predict: Optional[str] = None
    checkpoint: str = "best"  # what --predict loads: best (the best-validation epoch's model) or last
    dry_run: bool = False
    # A new run into a --run-dir that holds a run's record (checkpoint, metrics) moves that record aside to
    # RUN.old-<time> instead of being refused; never saved in config.yaml (a resume must not move its own run)
    overwrite: bool = False

    def __post_init__(self) -> None:
        validate(self)

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


def validate(cfg: TrainConfig) -> None:
    """Raises ``ValueError`` naming the flag, the constraint, the value and what to do."""
    for flag, value, choices in (("model", cfg.model, MODELS), ("checkpoint", cfg.checkpoint, CHECKPOINTS),
                                 ("task", cfg.task, TASKS),
                                 ("replicate", cfg.replicate, REPLICATE), ("strategy", cfg.strategy, STRATEGIES),
                                 ("sync", cfg.sync, SYNC_MODES), ("allreduce", cfg.allreduce, ALLREDUCE_MODES),
                                 ("compress", cfg.compress, COMPRESS_MODES), ("sacp", cfg.sacp, SACP_MODES),
                                 ("feature-norm", cfg.feature_norm, FEATURE_NORMS),
                                 ("precision", cfg.precision, PRECISIONS),
                                 ("partition-method", cfg.partition_method, PARTITION_METHODS)):
        if value not in choices:
            raise _fail(flag, f"must be one of {', '.join(choices)}", value)
    for flag, value, choices in (("decoder", cfg.decoder, DECODERS), ("neg-sampling", cfg.neg_sampling, NEGATIVES)):
        if value not in choices:
            raise _fail(flag, f"must be one of {', '.join(choices)}", value)
    _validate_link(cfg)
    if cfg.replicate != "none" and cfg.strategy != "minibatch":
        raise _fail("replicate", "applies to {0} only", cfg.replicate, "", ("strategy", "minibatch"))
    if cfg.cache_rows < -1:
        raise _fail("cache-rows", "must be -1 (every halo node), 0 (no cache) or a row count", cfg.cache_rows)
    if cfg.sacp_override:
        parse_sacp_overrides(cfg.sacp_override)
    if cfg.overwrite and (cfg.resume or cfg.predict):
        raise _fail("overwrite", "starts a new run: it cannot go with {0} or {1}", True,
                    "drop it to continue the run, or drop {0} to start anew", ("resume", "RUN"), ("predict", "RUN"))
    if cfg.compress == "bf16" and cfg.sync == "ddp" and not all(d.startswith("cuda") for d in cfg.devices):
        raise _fail("compress", "bf16 under {0} is torch's bf16 hook, which needs NCCL: every worker on a GPU",
                    cfg.compress, "on CPUs use {1} (graphdist's own bf16 cast) or {2}", ("sync", "ddp"),
                    ("sync", "dwbp"), ("compress", "fp16"))
    if cfg.compress == "int8" and cfg.sync == "ddp":
        raise _fail("compress", "int8 needs {0} or blocking (torch DDP has fp16 and bf16 hooks only)", cfg.compress,
                    "", ("sync", "dwbp"))
    for name in ("hidden", "layers", "batch_size", "epochs", "num_workers", "threads", "log_interval"):
        if getattr(cfg, name) < 1:
            raise _fail(name.replace("_", "-"), "must be >= 1", getattr(cfg, name))
    if "fanouts" in STRATEGIES[cfg.strategy].reads and len(cfg.fanouts) != cfg.layers:
        example = tuple((15, 10, 5, 5, 5, 5)[: cfg.layers])
        raise _fail("fanouts", f"has {len(cfg.fanouts)} entries but {{0}} is {cfg.layers}", None,
                    "give one fan-out per layer, e.g. {1}", ("layers", None), ("fanouts", example))
    if any(f == 0 or f < -1 for f in cfg.fanouts):
        raise _fail("fanouts", "entries must be positive or -1 (all neighbours)", list(cfg.fanouts))
    if not 0.0 <= cfg.dropout < 1.0:
        raise _fail("dropout", "must lie in [0, 1)", cfg.dropout)
    if cfg.staleness not in (0, 1):
        raise _fail("staleness", "must be 0 (exact) or 1 (wait-free, one step stale)", cfg.staleness)
    if not 0.0 <= cfg.smoothing < 1.0:
        raise _fail("smoothing", "must lie in [0, 1)", cfg.smoothing)
    if not 0.0 < cfg.boundary_sample <= 1.0:
        raise _fail("boundary-sample", "must lie in (0, 1]", cfg.boundary_sample)
    if cfg.boundary_sample < 1.0 and cfg.staleness:
        raise _fail("boundary-sample", "< 1 needs {0} (stale buffers assume every boundary row)",
                    cfg.boundary_sample, "", ("staleness", 0))
    if cfg.max_memory is not None and cfg.max_memory <= 0:
        raise _fail("max-memory", "must be > 0 GiB", cfg.max_memory)
    if cfg.avg_every < 1:
        raise _fail("avg-every", "must be >= 1 step", cfg.avg_every)
    if cfg.avg_seconds is not None and cfg.avg_seconds <= 0:
        raise _fail("avg-seconds", "must be > 0 seconds", cfg.avg_seconds)
    if cfg.correction_steps < 0:
        raise _fail("correction-steps", "must be >= 0", cfg.correction_steps)
    if cfg.avg_overlap and cfg.correction_steps:
        raise _fail("avg-overlap", "lands each average one step late, but {0} must start from the averaged model",
                    None, "use one of them", ("correction_steps", cfg.correction_steps))
    if cfg.placement not in PLACEMENTS:
        raise _fail("placement", f"must be one of {', '.join(PLACEMENTS)}", cfg.placement)
    if cfg.rebalance_every < 0:
        raise _fail("rebalance-every", "must be >= 0 steps (0: never)", cfg.rebalance_every)
    if not 0.0 < cfg.rebalance_eps <= 10.0:
        raise _fail("rebalance-eps", "must lie in (0, 10]", cfg.rebalance_eps)
    if cfg.rebalance_every and cfg.strategy != "minibatch":
        raise _fail("rebalance-every", "applies to {0} only (other strategies have no batch shares to move)",
                    cfg.rebalance_every, "", ("strategy", "minibatch"))
    if cfg.checkpoint_every < 1:
        raise _fail("checkpoint-every", "must be >= 1", cfg.checkpoint_every)
    if cfg.lr <= 0:
        raise _fail("lr", "must be > 0", cfg.lr)
    if cfg.timeout <= 0:
        raise _fail("timeout", "must be > 0 seconds", cfg.timeout)
    if len(cfg.devices) not in (1, cfg.num_workers):
        raise _fail(
            "devices", f"needs 1 entry or one per worker ({cfg.num_workers})", ",".join(cfg.devices),
            "e.g. {0} or {1}", ("devices", "cpu"), ("devices", "cpu,cuda:0"),
        )
    for dev in cfg.devices:
        if dev != "cpu" and not (dev == "cuda" or dev.startswith("cuda:") and dev[5:].isdigit()):
            raise _fail("devices", "entries must be cpu, cuda or cuda:<i>", dev)


def _validate_link(cfg: TrainConfig) -> None:
    """The link-prediction settings, and what link prediction cannot be combined with."""
    check_fractions(cfg.edge_split)
    for name in ("eval_negatives", "hits_k"):
        if getattr(cfg, name) < 1:
            raise _fail(name.replace("_", "-"), "must be >= 1", getattr(cfg, name))
    if cfg.num_negatives < 0:
        raise _fail("num-negatives", "must be >= 0", cfg.num_negatives)
    if cfg.task != "link":
        return
    if cfg.strategy != "minibatch":
        raise _fail("task", "link needs {0} (full-graph and aggregation train node labels)", cfg.task, "",
                    ("strategy", "minibatch"))
    if cfg.rebalance_every:
        raise _fail("rebalance-every", "applies to {0} only (link batches are edges of each worker's own parts, "
                    "which do not migrate)", cfg.rebalance_every, "", ("task", "node"))
    if cfg.placement == "profiled":
        raise _fail("placement", "profiled probes node batches; with {0} use {1} (or auto)", cfg.placement, "",
                    ("task", "link"), ("placement", "equal"))


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
    except ValueError as exc:
        raise ValueError(with_origin(str(exc), origin)) from None


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


def with_origin(message: str, origin: Mapping[str, str]) -> str:
    """Prefixes a refusal worded with flags by where the values it names came from, when not a flag.

    Example:
        >>> with_origin("--avg-every must be >= 1 step (got 0)", {"avg_every": "GRAPHDIST_AVG_EVERY"})
        'GRAPHDIST_AVG_EVERY: --avg-every must be >= 1 step (got 0)'
    """
    import re

    named = [where for name, where in origin.items()
             if re.search(rf"--{name.replace('_', '-')}(?![\w-])", message) and where not in message]
    return f"{', '.join(named)}: {message}" if named else message


def replace(cfg: TrainConfig, **changes: Any) -> TrainConfig:
    return dataclasses.replace(cfg, **changes)


__all__ = ["DEFAULT_DATASET", "TrainConfig", "resolve", "resolve_with_origin", "with_origin", "load_config_file",
           "env_overrides", "replace"]
