"""Does a change leave training as it was? The same seeded runs on two trees, their records compared.

A refactor that promises no behaviour change (config sections, capabilities read from declarations,
the trainers' kit) is checked here: each case trains once with the code of ``--before`` (a git
revision, checked out into a temporary worktree) and once with this working tree, alternating, and
then compares per epoch every ``metrics.jsonl`` value except what depends on the clock or the machine
(times, rates, memory, DWBP's hidden fractions), and the final parameters of both checkpoints with
``torch.equal``. Prints a table and writes JSON; exits 1 when any case differs.

Run book (2 CPU cores: about 2 minutes a case on synthetic-3000, the quickstart's graph is larger):

    .venv/bin/python bench/bench_same_runs.py --before HEAD                  # every case, against the last commit
    .venv/bin/python bench/bench_same_runs.py --before 889e914 --cases minibatch,fullgraph
    # writes bench/results/same_runs.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

# name -> graphdist-train flags (seeded; --run-dir is added). One per strategy, and the quickstart's command.
CASES: dict[str, list[str]] = {
    "quickstart": ["--epochs", "2"],
    "minibatch": ["--dataset", "synthetic-3000", "--epochs", "2", "--batch-size", "128", "--seed", "1"],
    "fullgraph": ["--dataset", "synthetic-3000", "--strategy", "fullgraph", "--model", "gcn", "--epochs", "3",
                  "--seed", "1"],
    "aggregation": ["--dataset", "synthetic-3000", "--strategy", "aggregation", "--epochs", "2", "--batch-size",
                    "128", "--avg-every", "4", "--correction-steps", "2", "--seed", "1"],
    "link": ["--dataset", "synthetic-3000", "--task", "link", "--epochs", "2", "--batch-size", "256", "--seed", "1"],
    # the smoke test's: one worker, a few steps
    "tiny": ["--dataset", "synthetic-2000", "--num-workers", "1", "--epochs", "1", "--max-steps", "3", "--seed", "1"],
}
# metrics.jsonl keys that depend on the clock, the machine's load or its memory, not on what was computed
VOLATILE = re.compile(r"time|_s$|per_s|rate|rss|memory|mib|hidden_fraction|wait|cores|threads")


def run_case(tree: Path, flags: list[str], run_dir: Path, env: dict[str, str]) -> float:
    """Trains ``flags`` with the code in ``tree``; returns the wall time. Raises on a failed run."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *flags, "--run-dir", str(run_dir)],
                          cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: graphdist-train {' '.join(flags)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def kept(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch's record without the values that depend on the clock or the machine."""
    return {k: v for k, v in record.items() if not VOLATILE.search(k)}


def compare(before: Path, after: Path) -> list[str]:
    """What differs between two run directories: metrics (volatile keys aside) and final parameters."""
    import torch

    out = []
    a, b = ([json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line.strip()]
            for d in (before, after))
    if len(a) != len(b):
        out.append(f"{len(a)} epochs before, {len(b)} after")
    for i, (x, y) in enumerate(zip(a, b), 1):
        x, y = kept(x), kept(y)
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                out.append(f"epoch {i} {key}: {x.get(key)!r} before, {y.get(key)!r} after")
    pa, pb = (torch.load(d / "checkpoint.pt", map_location="cpu", weights_only=False)["model"] for d in (before, after))
    if sorted(pa) != sorted(pb):
        out.append("the checkpoints hold other parameters")
    out += [f"parameter {name} differs" for name in sorted(set(pa) & set(pb)) if not torch.equal(pa[name], pb[name])]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", default="HEAD", help="the git revision to compare the working tree with")
    p.add_argument("--cases", default=",".join(c for c in CASES if c != "tiny"), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--out", default=str(RESULTS / "same_runs.json"))
    a = p.parse_args()
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        p.error(f"--cases: unknown {', '.join(unknown)} (known: {', '.join(CASES)})")
    env = {**os.environ, "GRAPHDIST_LOG": "warning"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="same-runs-") as tmp:
        base = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(base), a.before], cwd=REPO, check=True,
                       capture_output=True)
        commit = subprocess.run(["git", "rev-parse", a.before], cwd=REPO, capture_output=True, text=True).stdout.strip()
        try:
            for i, name in enumerate(cases):
                dirs = {side: Path(tmp) / f"{name}-{side}" for side in ("before", "after")}
                order = ("before", "after") if i % 2 == 0 else ("after", "before")  # alternate: load falls on both
                wall = {side: run_case(base if side == "before" else REPO, CASES[name], dirs[side], env)
                        for side in order}
                diffs = compare(dirs["before"], dirs["after"])
                rows.append({"case": name, "flags": CASES[name], "same": not diffs, "differences": diffs[:20],
                             "wall_s": wall})
                print(f"{name:<12} {'same' if not diffs else 'DIFFERS'}  ({wall['before']:.0f} s / {wall['after']:.0f} s)"
                      + "".join(f"\n    {d}" for d in diffs[:10]), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, capture_output=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"before": commit, "after": "working tree", "machine": os.uname().nodename,
                                       "rows": rows}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
