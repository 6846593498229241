"""A flag the run would not read is refused in one line, never silently ignored.

Two kinds of tests:

- the declarations are true: a one-worker run of each strategy, in this process, records which
  config fields its code actually reads (a traced ``TrainConfig``), and each strategy-specific
  option is read by exactly the strategies that declare it (``graphdist.options.STRATEGIES``);
- every (option, strategy / task / sync) pair is refused or accepted as declared, through the
  CLI's own resolution (flags, ``GRAPHDIST_<NAME>``, ``--config``) and the Python API; no worker
  is started.
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest

from graphdist.config import SYNC_MODES, ConfigError, TrainConfig, read_options, refuse_inapplicable, scoped
from graphdist.options import STRATEGIES, TASKS

# A value other than the default for each option some runs do not read (what a user would type).
SAMPLE = {"sampler": "cluster", "fanouts": "5,5", "cache_rows": "0", "prefetch": True, "replicate": "graph", "placement": "equal",
          "rebalance_every": "5", "rebalance_eps": "0.1", "staleness": "1", "smoothing": "0.5",
          "boundary_sample": "0.5", "max_memory": "4", "avg_every": "5", "avg_seconds": "2", "avg_optimizer": True,
          "avg_overlap": True, "correction_steps": "2", "allreduce": "ring", "sacp": "off", "sacp_override": "a=dense",
          "compress": "fp16", "sync": "blocking", "edge_split": "0.8,0.1,0.1", "eval_negatives": "50",
          "num_negatives": "2", "neg_sampling": "degree", "decoder": "dot", "hits_k": "5",
          "checkpoint_interval": "5steps", "loaders": "1", "sample_on": "cpu"}


def _runs():
    """Every strategy x task x sync the config accepts (link trains with minibatch only)."""
    for strategy, task, sync in itertools.product(STRATEGIES, TASKS, SYNC_MODES):
        if TASKS[task].strategies and strategy not in TASKS[task].strategies:
            continue
        yield strategy, task, sync


def _argv(strategy: str, task: str, sync: str, option: str) -> list[str]:
    """The run's flags, then ``option`` at its sample value. Aggregation syncs gradients only in its
    correction steps: its runs get some, so that the sync options apply there too."""
    argv = ["--strategy", strategy, "--task", task, "--sync", SAMPLE["sync"] if option == "sync" else sync]
    if STRATEGIES[strategy].syncs_when and option != STRATEGIES[strategy].syncs_when:
        argv += ["--" + STRATEGIES[strategy].syncs_when.replace("_", "-"), "2"]
    if option != "sync":
        value = SAMPLE[option]
        flag = "--" + option.replace("_", "-")
        argv += [flag] if value is True else [flag, value]
    if option == "smoothing" and strategy == "fullgraph":  # read only with stale buffers: give them
        argv += ["--staleness", "1"]
    return argv


def test_every_scoped_option_has_a_sample():
    assert scoped() <= set(SAMPLE), sorted(scoped() - set(SAMPLE))


@pytest.mark.parametrize("run", list(_runs()), ids=lambda r: "-".join(r))
def test_each_option_is_refused_or_accepted_as_declared(run):
    from graphdist.cli.train import _resolve

    strategy, task, sync = run
    for option in sorted(scoped()):
        argv = _argv(strategy, task, sync, option)
        probe = TrainConfig(strategy=strategy, task=task, sync=SAMPLE["sync"] if option == "sync" else sync,
                            correction_steps=2 if STRATEGIES[strategy].syncs_when else 0)
        declared = option in read_options(probe)
        try:
            _resolve(argv)
        except ValueError as exc:
            message = str(exc)
            if declared:
                # accepted as an option of this run; a refusal may only be about its value or a pairing
                assert "applies to" not in message and "applies where" not in message, (argv, message)
            else:
                assert message.startswith("--" + option.replace("_", "-")) and (
                    "applies" in message or "does nothing" in message), (argv, message)
                assert "\n" not in message
            continue
        assert declared, f"{' '.join(argv)} was accepted, but {option} is not read by this run"


def test_given_means_named_set_or_away_from_the_default(tmp_path, monkeypatch):
    from graphdist.cli.train import _resolve

    # A --config key at its default is not given; away from it, it is.
    (tmp_path / "same.yaml").write_text("staleness: 0\n")
    (tmp_path / "other.yaml").write_text("staleness: 1\n")
    assert _resolve(["--config", str(tmp_path / "same.yaml")]).staleness == 0
    with pytest.raises(ValueError, match=r"--config .*other.yaml: staleness: --staleness applies to --strategy "
                                         r"fullgraph only"):
        _resolve(["--config", str(tmp_path / "other.yaml")])
    # A variable is given whatever its value.
    monkeypatch.setenv("GRAPHDIST_DECODER", "mlp")
    with pytest.raises(ValueError, match="GRAPHDIST_DECODER: --decoder applies to --task link only"):
        _resolve([])


def test_a_resumed_runs_own_config_never_trips_it(tmp_path):
    import yaml

    from graphdist.cli.train import _resolve

    saved = TrainConfig(strategy="fullgraph", staleness=1, smoothing=0.5).to_dict()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    cfg = _resolve(["--resume", str(tmp_path), "--epochs", "9"])
    assert (cfg.strategy, cfg.staleness, cfg.smoothing, cfg.epochs) == ("fullgraph", 1, 0.5, 9)


def test_aggregation_reads_the_sync_options_only_with_correction_steps():
    from graphdist.cli.train import _resolve

    with pytest.raises(ValueError, match=r"^--sacp applies where gradients are synced: with --strategy aggregation "
                                         r"only when --correction-steps N is given \(got 'off'\)"):
        _resolve(["--strategy", "aggregation", "--sacp", "off"])
    assert _resolve(["--strategy", "aggregation", "--sacp", "off", "--correction-steps", "1"]).sacp == "off"
    assert _resolve(["--strategy", "aggregation", "--allreduce", "ring"]).allreduce == "ring"  # it averages by it


def test_the_api_names_keywords_and_refuses_before_any_worker_starts():
    import graphdist as gd

    with pytest.raises(ConfigError) as info:
        gd.train(dataset="synthetic-2000", strategy="minibatch", correction_steps=3)
    assert str(info.value) == ("correction_steps= applies to strategy='aggregation' only (got 3); "
                               "this run: strategy='minibatch'")
    with pytest.raises(ConfigError, match=r"^smoothing= applies only with staleness=1 \(got 0.5\)"):
        gd.train(dataset="synthetic-2000", strategy="fullgraph", smoothing=0.5)


def test_fullgraph_takes_any_layer_count_without_fanouts():
    assert TrainConfig(strategy="fullgraph", layers=3).layers == 3  # fan-outs are not read there
    with pytest.raises(ValueError, match="--fanouts has 2 entries but --layers is 3"):
        TrainConfig(strategy="minibatch", layers=3)


# ------------------------------------------------------------ the declarations are true


class _Traced(TrainConfig):
    """A ``TrainConfig`` that records every field the training code reads of it (into ``read``). Reads by
    the config itself (validation, ``to_dict``), by ``dataclasses`` (``replace``, ``repr``) and by the
    resume check (which compares every field it fixes) are not uses of the option: they are left out."""

    read: set = set()

    def __getattribute__(self, name):  # noqa: ANN001, ANN204
        if name in _FIELDS and not sys._getframe(1).f_code.co_filename.endswith(_NOT_USES):
            type(self).read.add(name)
        return super().__getattribute__(name)


_FIELDS = set(TrainConfig.__dataclass_fields__)
_NOT_USES = (os.path.join("graphdist", "config.py"), "dataclasses.py", os.path.join("graphdist", "resume.py"))


def test_strategy_declarations_are_what_the_code_reads(tmp_path):
    """One epoch of one in-process worker per strategy, every strategy-specific option at a value that is
    read where it applies. A field some strategies read and others not must be declared by exactly
    the ones that read it; what every strategy reads needs no declaration."""
    from graphdist.api import Trainer
    from graphdist.data import load_graph
    from partition.api import partition

    parts = partition(load_graph("synthetic-2000"), 1, out=tmp_path / "parts")
    read = {}
    for strategy in STRATEGIES:
        cfg = _Traced(partitions=str(parts), strategy=strategy, num_workers=1, epochs=1, hidden=8, fanouts=(3, 3),
                      batch_size=400, eval_every=0, run_dir=str(tmp_path / strategy), log_interval=1000,
                      staleness=1 if strategy == "fullgraph" else 0,
                      correction_steps=1 if strategy == "aggregation" else 0)
        _Traced.read = set()
        Trainer(cfg).fit()
        read[strategy] = set(_Traced.read)
    # Read where there is something to show, and never refused: the console's cadence (full-graph epochs
    # are one step, so nothing falls between their epoch lines).
    common = set.intersection(*read.values()) | {"log_interval"}
    for strategy, spec in STRATEGIES.items():
        own, declared = read[strategy] - common, set(spec.reads) - common
        assert own == declared, (f"--strategy {strategy}: read but not declared: {sorted(own - declared)}; "
                                 f"declared, not read: {sorted(declared - own)}")


@pytest.mark.parametrize("argv, named", [
    (["--predict", "RUN", "--epochs", "3"], "--epochs"),
    (["--predict", "RUN", "--no-plots"], "--no-plots"),
    (["--predict", "RUN", "--num-workers", "4"], "--num-workers"),
    (["--predict", "RUN", "--config", "c.yaml"], "--config"),
    (["--checkpoint", "last", "--dataset", "cora"], "--checkpoint"),
])
def test_predict_takes_only_its_own_flags_and_checkpoint_needs_predict(argv, named, capsys):
    """--predict runs the run's own config and model: a training flag beside it would change nothing."""
    from graphdist.cli.train import main

    assert main(argv) == 2  # refused before anything is read: RUN and c.yaml need not exist
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"graphdist-train: error: {named} ") and "--predict" in line, line
