"""A resume is bit-identical, or refused in one line, for a pairwise-covering set of option combinations.

The combinations: ``--strategy`` x ``--sync`` x ``--compress`` x ``--allreduce`` x ``--sacp`` x ``--precision``
x ``--task``, those the config accepts (no option given that the run would not read) and this machine
runs (bf16 on a CPU with bfloat16 instructions; fp16 emulated on a CPU, its loss scaling kept), narrowed to
a subset in which every pair of values of two options that a valid combination holds appears at least
once (21 of 1,524 on a bf16 CPU).
Each trains 2 epochs straight, and 1 epoch then ``--resume`` to 2, on a 1,000-node graph with 2 workers
and 3 steps an epoch; the final parameters must be ``torch.equal``, tensor for tensor. A combination
that cannot resume exactly must instead be refused at resume time (exit 2, before any worker starts) in
one line naming the option responsible (``--compress ...``). The generator and the check are
``bench/bench_resume.py``'s (one owner), which runs the full matrix.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench_resume():
    """``bench/bench_resume.py`` as a module (bench/ is scripts, not a package)."""
    name = "graphdist_bench_resume"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "bench_resume.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


matrix = _bench_resume()
COMBINATIONS = matrix.pairwise(matrix.valid_combinations(matrix.option_space(matrix.precisions(emulated_fp16=True))))


def test_the_subset_covers_every_pair_and_only_valid_combinations():
    space = matrix.option_space(matrix.precisions(emulated_fp16=True))
    valid = matrix.valid_combinations(space)
    assert all(matrix.refusal(c) is None for c in COMBINATIONS)
    wanted = set().union(*(matrix.pairs_of(c) for c in valid))
    assert set().union(*(matrix.pairs_of(c) for c in COMBINATIONS)) == wanted
    # int8 under ddp, and link prediction beyond minibatch, are refused by the config: never in it
    assert not any(c["compress"] == "int8" and c["sync"] == "ddp" for c in valid)
    assert not any(c["task"] == "link" and c["strategy"] != "minibatch" for c in valid)
    # every value of every option is in the subset
    assert {name: {c[name] for c in COMBINATIONS} for name in space} == {k: set(v) for k, v in space.items()}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """The graph in 2 parts, once per task, for the module."""
    return matrix.make_partitions(tmp_path_factory.mktemp("resume-matrix-parts"))


@pytest.mark.slow
@pytest.mark.timeout(150)  # three 2-worker runs of a few seconds (retried once or twice if `auto` timed otherwise)
@pytest.mark.parametrize("combo", COMBINATIONS, ids=matrix.combo_id)
def test_resume_is_bit_identical_or_refused(combo, parts, tmp_path):
    row = matrix.check_combination(combo, parts, tmp_path)
    assert row["outcome"] in ("equal", "refused"), f"{row['outcome']}: {row['detail']}"
    if row["outcome"] == "refused":
        phase, _, line = row["detail"].partition(": ")
        assert phase == "resume", f"refused before the resume: {row['detail']}"
        assert any(f"--{name}" in line for name in matrix.OPTIONS), f"the refusal names no option: {line}"
