"""Fuzzed command lines, environment variables and YAML configs for graphdist-train (hypothesis).

``main(argv)`` runs in-process with the launch stubbed: everything that happens before a worker
starts (parsing, the environment, the config file, dataset and partition checks, the run
directory) runs for real. Every example must end in one of the documented ways: exit 0 (it would
launch), or exit 2 with exactly one line on stderr that names a flag, variable or key it was
given. Never a traceback, never exit 1 (no worker started), never a hang. Derandomized, so CI
sees the same ~200 examples every time.
"""

from __future__ import annotations

import os
import string
import tempfile
from pathlib import Path
from unittest import mock

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is a dev dependency: pip install -e '.[dev]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

# hypothesis keeps caches in ./.hypothesis; tests write nowhere but temporary directories.
set_hypothesis_home_dir(tempfile.mkdtemp(prefix="graphdist-hypothesis-"))
from hypothesis import strategies as st  # noqa: E402

from graphdist.cli.train import build_parser, main  # noqa: E402

SETTINGS = settings(max_examples=70, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# Flags that would start real work or point at runs: kept out of the fuzzed set, tested elsewhere.
LEFT_OUT = {"--help", "--resume", "--predict", "--run-dir", "--config", "--dataset", "--partitions"}
FLAGS = sorted({opt for action in build_parser()._actions for opt in action.option_strings
                if opt.startswith("--") and opt not in LEFT_OUT and opt.replace("_", "-") not in LEFT_OUT})
VALUES = ["0", "1", "2", "-1", "3", "0.5", "1e9", "-0.1", "abc", "", "nan", "inf", "-1,-1", "5,5", "10,5,2", "1,",
          "sage", "gcn", "gat", "metis", "random", "minibatch", "fullgraph", "aggregation", "dwbp", "ddp", "row",
          "none", "cpu", "cuda:0", "best", "last", "yes", "true", "[1, 2]", "{a: 1}"]
# Small graphs only: a fuzzed example must never start a long load or partitioning.
DATASETS = ["synthetic-300", "synthetic-0", "no-such-graph", "/nonexistent/graph.npz", "synthetic-abc"]
FIELDS = sorted({f.lstrip("-").replace("-", "_") for f in FLAGS}) + ["epoch", "lerning_rate", "hiden"]

text = st.text(alphabet=string.ascii_letters + string.digits + ",.-_:/ ", max_size=12)
value = st.one_of(st.sampled_from(VALUES), text)
flag_pair = st.tuples(st.sampled_from(FLAGS + ["--no-such-flag", "--epoch"]), value)
yaml_scalar = st.one_of(st.sampled_from(VALUES), st.integers(-3, 10**6), st.floats(allow_nan=True), st.booleans(),
                        st.none(), st.lists(st.integers(-1, 20), max_size=3))


class Launched(BaseException):
    """Raised by the stubbed launch: everything before the workers passed."""


@pytest.fixture(autouse=True)
def _stub_launch(monkeypatch):
    from graphdist.api import Trainer

    def launch(self, *args, **kwargs):
        raise Launched()

    monkeypatch.setattr(Trainer, "_spawn", launch)
    monkeypatch.setattr(Trainer, "_run_job_rank", launch)


def _run(argv: list[str], capsys, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """``main(argv)`` under ``env``; (exit status, stderr lines). 0 = it got as far as the launch."""
    capsys.readouterr()
    with mock.patch.dict(os.environ, env or {}):
        try:
            rc = main(argv)
        except Launched:
            rc = 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return rc, err


def _names_one(line: str, names: list[str]) -> bool:
    forms = {n for name in names for n in (name, name.replace("_", "-"), name.replace("-", "_"))}
    return any(form in line for form in forms)


def _check(rc: int, err: list[str], given: list[str]) -> None:
    assert rc in (0, 2), (rc, err)
    assert not any("Traceback" in line for line in err), err
    if rc == 2:
        errors = [line for line in err if line.startswith("graphdist-train: error: ")]
        assert len(errors) == 1, err
        assert _names_one(errors[0], given), (errors[0], given)


def _base(run_dir: Path, dataset: str = "synthetic-300") -> list[str]:
    return ["--dataset", dataset, "--run-dir", str(run_dir), "--num-workers", "1"]


@SETTINGS
@given(pairs=st.lists(flag_pair, max_size=4), dataset=st.sampled_from(DATASETS))
def test_fuzzed_flags(pairs, dataset, capsys):
    argv = [x for pair in pairs for x in pair]
    with tempfile.TemporaryDirectory() as tmp:
        rc, err = _run([*_base(Path(tmp) / "run", dataset), *argv], capsys)
    _check(rc, err, [f for f, _ in pairs] + (["--dataset"] if dataset != "synthetic-300" else []))


@SETTINGS
@given(env=st.dictionaries(st.sampled_from([f"GRAPHDIST_{f.upper()}" for f in FIELDS]), value, max_size=3))
def test_fuzzed_environment(env, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        rc, err = _run(_base(Path(tmp) / "run"), capsys, env)
    _check(rc, err, list(env))


@SETTINGS
@given(config=st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), yaml_scalar, max_size=4),
    st.text(alphabet=string.printable, max_size=40),
))
def test_fuzzed_yaml_config(config, capsys):
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.yaml"
        path.write_text(yaml.safe_dump(config) if isinstance(config, dict) else config)
        rc, err = _run([*_base(Path(tmp) / "run"), "--config", str(path)], capsys)
    keys = list(config) if isinstance(config, dict) else []
    _check(rc, err, [*keys, str(path), "--config"])


PARTITION_FLAGS = ["--num-parts", "--num_parts", "--method", "--seed", "--halo-hops", "--balance", "--force",
                   "--no-verify", "--progress", "--stats", "--no-such-flag"]


@SETTINGS
@given(pairs=st.lists(st.tuples(st.sampled_from(PARTITION_FLAGS), value), max_size=3),
       dataset=st.sampled_from(DATASETS))
def test_fuzzed_partition_flags(pairs, dataset, capsys):
    from graphdist.cli.partition import main as partition_main

    argv = [x for pair in pairs for x in pair]
    with tempfile.TemporaryDirectory() as tmp:
        capsys.readouterr()
        rc = partition_main(["--dataset", dataset, "--num-parts", "2", "--out", str(Path(tmp) / "p"), *argv])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("graphdist-partition: error: ")]
    assert rc in (0, 2), (rc, err)
    if rc == 2:
        assert len(err) == 1 and _names_one(err[0], [f for f, _ in pairs] + ["--dataset", "--out", "--num-parts"]), (err, pairs)
