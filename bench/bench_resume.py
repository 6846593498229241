"""Resume exactness over the option space: every valid combination trains 2 epochs straight, and 1 epoch then
``--resume`` to 2; the two final models must be equal tensor for tensor (``torch.equal``).

The space (:data:`OPTIONS`, as the config declares the choices): ``--strategy`` x ``--sync`` x ``--compress`` x
``--allreduce`` x ``--sacp`` x ``--precision`` x ``--task``. A combination is valid when the config accepts its
runs (``TrainConfig``: int8 is refused under ddp, link prediction with any strategy but minibatch; and an
option given that the run would not read, such as ``--sacp off`` or ``--allreduce hd`` under ddp:
``graphdist.config.refuse_inapplicable``; a value equal to the default is not given) and this machine's
device runs its precision (``graphdist.trainers.precision.check_precision``: bf16 on a CPU with AVX512_BF16
or AMX; fp16 on a GPU, or on a CPU under ``GRAPHDIST_TEST_EMULATED_FP16=1``, which runs the products in
float32 but keeps the loss scaling, the part of fp16 a resume must restore; on by default,
``--no-emulated-fp16`` leaves it out). Each valid combination gets one of four outcomes
(:func:`check_combination`):

* ``equal``: the resumed run's parameters equal the uninterrupted run's, every tensor.
* ``differ``: one tensor differs (the first is named, with its largest difference).
* ``refused``: a run exited 2 (refused before any worker started) in one line, recorded; a combination
  that cannot resume exactly must be refused like this, at resume time, naming why.
* ``error``: a run failed otherwise (exit 1, or a refusal of more than one line), or the straight run's
  timed choices never matched the interrupted run's (nothing to compare).

Every run: 2 workers, ``synthetic`` graph of 1,000 nodes (16 features, 4 classes) partitioned once per task
(metis; link: its own edge split, 5 stored negatives), GraphSAGE 2 x 16, fan-outs 5,5 (where sampled), 64
seeds a step, 3 steps an epoch (``--max-steps``), dropout on (the resume must restore the random streams),
evaluation every epoch, ``--timeout 30``: :data:`RUN`. Aggregation also gets ``--avg-every 2
--correction-steps 1`` (:data:`AGGREGATION`): an average mid-epoch, and correction steps, the only steps
whose gradients it syncs (without them its sync options would apply to nothing). ``--compress auto`` (and
``--allreduce auto`` across hosts) are timed at a run's start, and can fall one way in one run and the
other way in the next: while the straight and the interrupted run decided differently, they are run
again by turns (4 runs more at most), so that what is compared is a resume, not two timings.

``--pairwise`` runs a subset in which every pair of values of two options that some valid combination
holds appears at least once (greedy, deterministic: :func:`pairwise`); ``tests/trainers/
test_resume_matrix.py`` runs that subset, and imports this file's generator and check.

Run book (2 CPU cores; in-process runs, their workers forked from a warm fork server; 6-10 s a combination):
    python bench/bench_resume.py                  # the full matrix: 1,524 valid on a bf16 CPU, ~3-4 h
    python bench/bench_resume.py --pairwise       # the suite's subset: 21 combinations, ~3 min
    python bench/bench_resume.py --list           # the combinations only, nothing trained
    python bench/bench_resume.py --where compress=int8,auto sync=dwbp   # a slice of the full matrix
    python bench/bench_resume.py --limit 2 --out /tmp/resume.json
Results: bench/results/resume.json (git-ignored); the workers' own output goes to resume-workers.log beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def _options() -> dict[str, tuple[str, ...]]:
    """The options under test, each with every value it takes, as the config declares them (the order
    is the table's and the ids')."""
    from graphdist.config import (ALLREDUCE_MODES, COMPRESS_MODES, PRECISIONS, SACP_MODES, STRATEGIES,
                                  SYNC_MODES, TASKS)

    return {"strategy": tuple(STRATEGIES), "sync": tuple(SYNC_MODES), "compress": tuple(COMPRESS_MODES),
            "allreduce": tuple(ALLREDUCE_MODES), "sacp": tuple(SACP_MODES), "precision": tuple(PRECISIONS),
            "task": tuple(TASKS)}


OPTIONS = _options()
NUM_WORKERS = 2  # hd needs a power of two; hier and hd run on one host too
NODES = 1000
# The run every combination makes, as TrainConfig fields; a field this combination's run does not read is
# left out (giving it would be refused: graphdist.config.refuse_inapplicable), e.g. --fanouts under fullgraph.
RUN: dict[str, Any] = {"num_workers": NUM_WORKERS, "hidden": 16, "fanouts": (5, 5), "batch_size": 64, "max_steps": 3,
                       "log_interval": 1000, "timeout": 30.0, "seed": 0}
AGGREGATION: dict[str, Any] = {"avg_every": 2, "correction_steps": 1}
EMULATED_FP16 = "GRAPHDIST_TEST_EMULATED_FP16"
OUTCOMES = ("equal", "differ", "refused", "error")

Combination = dict[str, str]


# ------------------------------------------------------------------------------------------ the matrix

def precisions(emulated_fp16: bool = False, device: str = "cpu") -> tuple[str, ...]:
    """The ``--precision`` values ``device`` runs: fp32; bf16 where it multiplies bfloat16; fp16 on a GPU, or
    emulated (``GRAPHDIST_TEST_EMULATED_FP16=1``: products in float32, the loss scaling kept).

    Example:
        >>> precisions()[0]
        'fp32'
    """
    import torch

    from graphdist.trainers.precision import check_precision

    out = []
    for precision in OPTIONS["precision"]:
        try:
            with _environ({EMULATED_FP16: "1"} if emulated_fp16 else {}):
                check_precision(precision, torch.device(device))
        except ValueError:
            continue
        out.append(precision)
    return tuple(out)


def option_space(precision_values: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """:data:`OPTIONS` with ``--precision`` narrowed to ``precision_values`` (this machine's)."""
    return {**OPTIONS, "precision": tuple(p for p in OPTIONS["precision"] if p in precision_values)}


def settings(combo: Combination) -> dict[str, Any]:
    """The ``TrainConfig`` fields of ``combo``'s runs: ``combo``, and those of :data:`RUN` (and for aggregation
    :data:`AGGREGATION`) that the run reads.

    Raises:
        ValueError: ``TrainConfig`` refuses them.

    Example:
        >>> "fanouts" in settings({"strategy": "fullgraph"}), settings({"strategy": "aggregation"})["avg_every"]
        (False, 2)
    """
    from graphdist.config import TrainConfig

    values = {**RUN, **(AGGREGATION if combo.get("strategy") == "aggregation" else {}), **combo}
    try:
        from graphdist.config import read_options, scoped
    except ImportError:  # a config that has every run read every option
        return values
    read, some = read_options(TrainConfig(**values)), scoped()
    return {k: v for k, v in values.items() if k in combo or k not in some or k in read}


def given(values: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``values`` other than ``TrainConfig``'s defaults: what a run gives as flags."""
    from dataclasses import fields

    from graphdist.config import TrainConfig

    defaults = {f.name: f.default for f in fields(TrainConfig)}
    return {k: v for k, v in values.items() if v != defaults.get(k)}


def refusal(combo: Combination, meta: Optional[dict[str, Any]] = None) -> Optional[str]:
    """Why the config refuses ``combo``'s runs (``TrainConfig``, and an option given that the run would not
    read), or, given a partition's ``meta.json``, the strategy's own check; None when it is valid.

    Example:
        >>> refusal({"strategy": "minibatch", "sync": "ddp", "compress": "int8"}).startswith("--compress int8")
        True
        >>> refusal({"strategy": "minibatch", "sync": "ddp", "sacp": "off"}).startswith("--sacp")
        True
        >>> refusal({"strategy": "minibatch", "sync": "ddp", "sacp": "auto"}) is None
        True
    """
    from graphdist.config import TrainConfig

    try:
        values = settings(combo)
        cfg = TrainConfig(**values)
        try:
            from graphdist.config import refuse_inapplicable
        except ImportError:  # a config that has every run read every option
            pass
        else:
            refuse_inapplicable(cfg, given(values))
        if meta is not None:
            from graphdist.trainers.base import strategy_class

            strategy_class(cfg.strategy).check(cfg, meta, None)
    except ValueError as exc:
        return str(exc)
    return None


def valid_combinations(space: dict[str, tuple[str, ...]],
                       meta: Optional[dict[str, Any]] = None) -> list[Combination]:
    """Every combination of ``space``'s values that :func:`refusal` accepts, in product order."""
    names = list(space)
    combos = (dict(zip(names, values)) for values in itertools.product(*space.values()))
    return [c for c in combos if refusal(c, meta) is None]


def pairs_of(combo: Combination) -> set[tuple[tuple[str, str], tuple[str, str]]]:
    """Every pair of ``(option, value)`` items of ``combo``, of two different options.

    Example:
        >>> sorted(pairs_of({"sync": "ddp", "compress": "fp16"}))
        [(('sync', 'ddp'), ('compress', 'fp16'))]
    """
    return set(itertools.combinations(combo.items(), 2))


def pairwise(combos: Sequence[Combination]) -> list[Combination]:
    """A subset of ``combos`` holding every pair of (option, value) items that some combination holds.

    Greedy: each pick is the combination covering the most pairs not yet covered; among those, the one
    whose new pairs are rarest (the sum of 1 / the number of combinations holding each: a rare pair left
    for later costs a pick of its own); then the first in ``combos``' order. Deterministic (``math.fsum``
    does not depend on the order of a set), and near the least possible: for the space here 21
    combinations where no fewer than 20 (5 compressions x 4 allreduces) can do.

    Example:
        >>> combos = [{"a": a, "b": b, "c": c} for a in "xy" for b in "xy" for c in "xy"]
        >>> len(pairwise(combos))
        4
    """
    import math
    from collections import Counter

    pairs = [pairs_of(c) for c in combos]
    holding = Counter(p for ps in pairs for p in ps)
    uncovered = set(holding)
    chosen: list[Combination] = []
    while uncovered:
        best = max(range(len(combos)), key=lambda i: (len(pairs[i] & uncovered),
                                                      math.fsum(1 / holding[p] for p in pairs[i] & uncovered), -i))
        chosen.append(combos[best])
        uncovered -= pairs[best]
    return chosen


def combo_id(combo: Combination) -> str:
    """``minibatch-dwbp-int8-ring-on-fp32-node``: the values in :data:`OPTIONS`' order."""
    return "-".join(combo[name] for name in OPTIONS if name in combo)


def combo_args(combo: Combination) -> list[str]:
    """The flags of ``combo``'s runs: :func:`given` of its :func:`settings` (a default is not repeated).

    Example:
        >>> " ".join(combo_args({"strategy": "fullgraph", "sacp": "auto"}))  # no --fanouts: nothing sampled
        '--hidden 16 --batch-size 64 --max-steps 3 --log-interval 1000 --timeout 30.0 --strategy fullgraph'
    """
    args = []
    for name, value in given(settings(combo)).items():
        shown = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        args += [f"--{name.replace('_', '-')}", shown]
    return args


# -------------------------------------------------------------------------------------------- the check

def make_partitions(root: Path, nodes: int = NODES) -> dict[str, Path]:
    """The graph split into :data:`NUM_WORKERS` parts, once per task (link: its own edge split)."""
    from graphdist.data.synthetic import synthetic
    from partition.api import partition

    graph = synthetic(nodes, num_features=16, num_classes=4, seed=0)
    return {"node": Path(partition(graph, NUM_WORKERS, method="metis", out=root / "node", seed=0)),
            "link": Path(partition(graph, NUM_WORKERS, method="metis", out=root / "link", seed=0, task="link",
                                   eval_negatives=5))}


def _environ(changes: dict[str, str]) -> Any:
    """The process environment with ``changes`` while the context lasts (``unittest.mock.patch.dict``)."""
    from unittest import mock

    return mock.patch.dict(os.environ, changes)


def _train(args: Sequence[str]) -> tuple[int, list[str], float]:
    """``graphdist-train args`` in this process (its workers fork from the warm fork server): exit code,
    its error lines, seconds."""
    from graphdist.cli.train import main

    err, out = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main([str(a) for a in args])
    lines = [l for l in err.getvalue().splitlines() if l.startswith("graphdist-train:")]
    return rc, lines, time.perf_counter() - start


def _checkpoint(run_dir: Path) -> dict[str, Any]:
    import torch

    return torch.load(run_dir / "checkpoint.pt", weights_only=True)


def _error(phase: str, rc: int, lines: list[str]) -> tuple[str, str]:
    """``refused`` for a one-line refusal (exit 2: before any worker started), else ``error``; and the
    phase with the line(s), ``" | "``-joined."""
    text = " | ".join(l.removeprefix("graphdist-train: error: ") for l in lines) or f"exit {rc}, no error line"
    return ("refused" if rc == 2 and len(lines) == 1 else "error"), f"{phase}: {text}"


def check_combination(combo: Combination, parts: dict[str, Path], work: Path, epochs: int = 2,
                      retries: int = 4) -> dict[str, Any]:
    """Trains ``combo`` ``epochs - 1`` epochs then ``--resume`` to ``epochs`` (the interrupted run), and
    ``epochs`` straight; compares the two final models. Returns the row: ``outcome`` (one of
    :data:`OUTCOMES`), ``detail`` (the differing tensor, or the refusal's line), ``seconds``, each run's.

    A timed choice (``--compress auto``: fp16 or int8, by probe times) can fall one way in one run and the
    other in the next, most of all on a loaded machine: the comparison is then of two timings, not of
    a resume. So while the two runs' choices (each checkpoint's ``decisions``) differ, the straight run
    and the interrupted one are made again by turns, up to ``retries`` runs more, until a straight and an
    interrupted run chose alike."""
    import torch

    start = time.perf_counter()
    name = combo_id(combo)
    common = ["--partitions", parts[combo["task"]], *combo_args(combo)]
    env = {EMULATED_FP16: "1"} if combo.get("precision") == "fp16" else {}
    row: dict[str, Any] = {"combination": dict(combo), "id": name, "runs_s": {}}

    def done(outcome: str, detail: str = "") -> dict[str, Any]:
        row.update(outcome=outcome, detail=detail, seconds=round(time.perf_counter() - start, 2))
        return row

    def decided(checkpoint: dict[str, Any]) -> str:
        return json.dumps(checkpoint["extra"].get("decisions") or {}, sort_keys=True)

    # decisions -> the final checkpoint of a run that made them; or (outcome, detail) of a failed run
    straights: dict[str, dict[str, Any]] = {}
    interrupteds: dict[str, dict[str, Any]] = {}

    def interrupted_run(i: int) -> Optional[tuple[str, str]]:
        run_dir = work / f"{name}-resumed{i}"
        shutil.rmtree(run_dir, ignore_errors=True)
        for phase, args in (("first epoch", [*common, "--epochs", epochs - 1, "--run-dir", run_dir]),
                            ("resume", ["--resume", run_dir, "--epochs", epochs])):
            rc, lines, row["runs_s"][phase] = _train(args)
            if rc != 0:
                return _error(phase, rc, lines)
        checkpoint = _checkpoint(run_dir)
        interrupteds.setdefault(decided(checkpoint), checkpoint)
        return None

    def straight_run(i: int) -> Optional[tuple[str, str]]:
        run_dir = work / f"{name}-straight{i}"
        shutil.rmtree(run_dir, ignore_errors=True)
        rc, lines, row["runs_s"]["straight"] = _train([*common, "--epochs", epochs, "--run-dir", run_dir])
        if rc != 0:
            return _error("straight", rc, lines)
        checkpoint = _checkpoint(run_dir)
        straights.setdefault(decided(checkpoint), checkpoint)
        return None

    runs = [interrupted_run, straight_run]
    with _environ(env):
        for i in range(2 + retries):
            failed = runs[i % 2](i // 2)
            if failed:
                return done(*failed)
            if i and straights.keys() & interrupteds.keys():
                break
    common_choice = sorted(straights.keys() & interrupteds.keys())
    row["retries"] = max(0, i - 1)
    if not common_choice:
        return done("error", f"straight: its timed choices {sorted(straights)} never matched the interrupted "
                             f"runs' {sorted(interrupteds)} ({i + 1} runs): nothing to compare")
    row["decisions"] = json.loads(common_choice[0])
    reference, resumed = straights[common_choice[0]], interrupteds[common_choice[0]]
    a, b = reference["model"], resumed["model"]
    if a.keys() != b.keys():
        return done("differ", f"parameter names differ: {sorted(set(a) ^ set(b))}")
    for key in a:
        if a[key].shape != b[key].shape:
            return done("differ", f"{key}: shape {tuple(a[key].shape)} vs {tuple(b[key].shape)}")
        if not torch.equal(a[key], b[key]):
            diff = (a[key].double() - b[key].double()).abs().max().item()
            return done("differ", f"{key} (max |diff| {diff:.3g})")
    return done("equal")


# --------------------------------------------------------------------------------------------- the bench

@contextlib.contextmanager
def _workers_to(log: Path) -> Iterator[None]:
    """Starts the fork server with its stdout and stderr on ``log``: every worker forked from it writes
    there (their banners and progress would bury the table), while this process prints as usual."""
    from graphdist.launch import start_workers_early

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            start_workers_early()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
    yield


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per outcome; the differing and refused combinations with their detail."""
    counts = {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}
    return {"counts": counts,
            **{o: {r["id"]: r["detail"] for r in rows if r["outcome"] == o} for o in OUTCOMES if o != "equal"}}


def machine() -> dict[str, Any]:
    import subprocess

    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    from graphdist.models.dense import native_bf16

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "native_bf16": native_bf16(), "commit": commit}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="e.g. python bench/bench_resume.py --pairwise --out /tmp/resume.json",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairwise", action="store_true", help="the pairwise-covering subset (the suite's), not all")
    p.add_argument("--limit", type=int, default=0, help="the first N combinations only (0: all)")
    p.add_argument("--sample", type=int, default=0,
                   help="N combinations drawn at random (seeded by --seed) from the valid ones not in the pairwise "
                        "subset, when the full matrix takes longer than there is (0: none drawn)")
    p.add_argument("--seed", type=int, default=0, help="--sample's draw")
    p.add_argument("--where", nargs="+", default=[], metavar="OPTION=V1,V2",
                   help="only combinations with these values, e.g. --where compress=int8,auto sync=dwbp")
    p.add_argument("--only", default="", help="combinations whose id contains this text, e.g. "
                                              "minibatch-dwbp-none-ring-off-fp32-node")
    p.add_argument("--no-emulated-fp16", dest="emulated_fp16", action="store_false",
                   help=f"leave --precision fp16 out on a CPU (default: in, under {EMULATED_FP16}=1)")
    p.add_argument("--list", action="store_true", help="print the combinations and exit (nothing trained)")
    p.add_argument("--out", default=str(RESULTS / "resume.json"))
    args = p.parse_args(argv)
    if args.limit < 0 or args.sample < 0:
        p.error(f"--limit and --sample must be >= 0 (got {args.limit}, {args.sample})")
    if args.sample and args.pairwise:
        p.error("--sample draws from outside the pairwise subset: give one of --sample and --pairwise")
    where: dict[str, set[str]] = {}
    for item in args.where:
        name, _, values = item.partition("=")
        if name not in OPTIONS or not values:
            p.error(f"--where takes OPTION=V1,V2 with OPTION one of {', '.join(OPTIONS)} (got {item!r})")
        where[name] = set(values.split(","))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    space = option_space(precisions(args.emulated_fp16))
    valid = valid_combinations(space)
    subset = pairwise(valid)
    chosen = subset if args.pairwise else valid
    if args.sample:
        import random

        rest = [c for c in valid if c not in subset]
        chosen = random.Random(args.seed).sample(rest, min(args.sample, len(rest)))
    chosen = [c for c in chosen if args.only in combo_id(c) and all(c[k] in v for k, v in where.items())]
    chosen = chosen[: args.limit] if args.limit else chosen
    total = 1
    for values in space.values():
        total *= len(values)
    print(f"option space: {', '.join(f'{k} {len(v)}' for k, v in space.items())} = {total} combinations; "
          f"{len(valid)} valid; pairwise subset {len(subset)}; running {len(chosen)}"
          f"{' (pairwise)' if args.pairwise else ''}")
    if args.list:
        for c in chosen:
            print(combo_id(c))
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.with_name(out.stem + "-workers.log")
    log.unlink(missing_ok=True)
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
                              "space": {k: list(v) for k, v in space.items()}, "run": RUN,
                              "aggregation": AGGREGATION, "valid": len(valid),
                              "pairwise": len(subset),
                              "mode": ("pairwise" if args.pairwise else f"sample of {len(chosen)} (seed {args.seed})"
                                       if args.sample else "full")}
    rows: list[dict[str, Any]] = []
    width = max([len(combo_id(c)) for c in chosen] + [11])
    print(f"\n{'combination':<{width}}  {'outcome':<8} {'s':>6}  detail")
    with tempfile.TemporaryDirectory(prefix="graphdist-bench-resume-") as name, _workers_to(log):
        tmp = Path(name)
        parts = make_partitions(tmp / "parts")
        for combo in chosen:
            row = check_combination(combo, parts, tmp / "runs")
            shutil.rmtree(tmp / "runs", ignore_errors=True)
            rows.append(row)
            print(f"{row['id']:<{width}}  {row['outcome']:<8} {row['seconds']:>6.1f}  {row['detail']}", flush=True)
    summary = summarize(rows)
    result.update(summary=summary, rows=rows)
    print("\n" + ", ".join(f"{o} {n}" for o, n in summary["counts"].items()))
    for outcome in ("differ", "refused", "error"):
        for combo, detail in summary[outcome].items():
            print(f"  {outcome:<8} {combo}: {detail}")
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=1))
    os.replace(tmp_out, out)
    print(f"\nwrote {out} (workers' output: {log})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
