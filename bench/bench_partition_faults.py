"""graphdist-partition SIGKILLed at random moments: never a directory that looks complete, nothing left.

One uninterrupted run measures the command's wall time and writes the reference directory. Then
``--runs`` runs each get SIGKILLed at a moment drawn uniformly from [0, wall] (so the kills land
in start-up, loading, partitioning and writing in proportion to the time each takes) and, half
of them, with ``--force`` over an existing good directory; half of the kills are drawn from the
writing phase alone (from when the temporary sibling appears to the rename, as measured in the
reference run). After each kill:

* ``looks complete``: the output directory exists with a ``meta.json``; it must then verify
  (every checksum) and be either the reference or the previous directory, never a torn one;
* ``siblings left``: hidden ``.<name>.tmp-*`` / ``.old-*`` directories the killed writer left.

Then a clean run of the same command must succeed and leave no sibling (it removes what the dead
writer left, or restores the previous directory when the kill came mid-replace).

Run book:
    python bench/bench_partition_faults.py                          # pubmed, 4 parts, N = 10
    python bench/bench_partition_faults.py --dataset synthetic-200k --runs 20
Results: bench/results/partition_faults.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def command(a: argparse.Namespace, out: Path, force: bool) -> list[str]:
    return [sys.executable, "-m", "graphdist.cli.partition", "--dataset", a.dataset, "--num-parts", str(a.parts),
            "--method", a.method, "--out", str(out), *(["--force"] if force else [])]


def run(cmd: list[str], kill_after: float | None, watch: Path | None = None) -> dict[str, Any]:
    """Runs ``cmd``; SIGKILLs its process group ``kill_after`` seconds in (None: let it finish).

    With ``watch`` (the output path), also records when its temporary sibling first appeared
    (writing started) and when the output appeared (the rename).
    """
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed, write_start, write_end = False, None, None
    while proc.poll() is None:
        now = time.monotonic() - start
        if kill_after is not None and now >= kill_after:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        if watch is not None and write_start is None and any(watch.parent.glob(f".{watch.name}.tmp-*")):
            write_start = now
        if watch is not None and write_start is not None and write_end is None and (watch / "meta.json").exists():
            write_end = now
        time.sleep(0.002)
    proc.wait()
    err = proc.stderr.read().decode() if proc.stderr else ""
    return {"rc": proc.returncode, "killed": killed, "wall_s": time.monotonic() - start, "write_start_s": write_start, "write_end_s": write_end,
            "stderr_tail": err.strip().splitlines()[-1:]}


def inspect(out: Path, reference: dict[str, str], previous: dict[str, str] | None) -> dict[str, Any]:
    """What a user would find at ``out``: complete or not; if complete, whether it verifies and whose it is."""
    from partition.format import read_meta, verify_files

    siblings = sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))
    row: dict[str, Any] = {"siblings_left": len(siblings), "looks_complete": (out / "meta.json").exists(),
                           "verifies": None, "whose": None}
    if row["looks_complete"]:
        try:
            meta = read_meta(out)
            verify_files(out, meta)
            row["verifies"] = True
            files = {k: v["sha256"] for k, v in meta["files"].items()}
            row["whose"] = "new" if files == reference else "previous" if files == previous else "other"
        except Exception as exc:  # noqa: BLE001 - a torn directory is what this bench looks for
            row["verifies"], row["error"] = False, str(exc)[:200]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="pubmed")
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--method", default="metis")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "partition_faults.json"))
    a = p.parse_args()
    sys.path.insert(0, str(REPO))
    from partition.format import read_meta

    rng = random.Random(a.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphdist-partition-faults-") as tmpdir:
        tmp = Path(tmpdir)
        ref_out = tmp / "reference"
        ref = run(command(a, ref_out, force=False), None, watch=ref_out)
        if ref["rc"] != 0:
            sys.exit(f"the reference run failed: {ref['stderr_tail']}")
        reference = {k: v["sha256"] for k, v in read_meta(ref_out)["files"].items()}
        previous_dir = tmp / "previous"  # a good directory of another part count, for the --force runs
        previous: dict[str, str] | None = None
        if a.runs > 1:
            run(command(argparse.Namespace(**{**vars(a), "parts": a.parts + 1}), previous_dir, force=False), None)
            previous = {k: v["sha256"] for k, v in read_meta(previous_dir)["files"].items()}
        wall, write_start = ref["wall_s"], ref["write_start_s"] or 0.0
        write_end = ref["write_end_s"] or wall
        print(f"reference: {a.dataset} {a.parts} parts ({a.method}) in {wall:.1f} s, writing {write_start:.2f} to "
              f"{write_end:.2f} s")
        for i in range(a.runs):
            out = tmp / f"run-{i}" / "p"
            out.parent.mkdir()
            force = i % 2 == 1
            if force:
                shutil.copytree(previous_dir, out)
            # every other kill lands while the directory is being written, the rest anywhere
            at = rng.uniform(write_start, write_end) if i % 4 >= 2 else rng.uniform(0.0, wall)
            killed = run(command(a, out, force), at)
            row = {"run": i, "force": force, "kill_at_s": round(at, 2), "killed": killed["killed"],
                   **inspect(out, reference, previous if force else None)}
            again = run(command(a, out, force=True), None)
            after = inspect(out, reference, previous)
            row.update(rerun_rc=again["rc"], siblings_after_rerun=after["siblings_left"],
                       rerun_verifies=after["verifies"], rerun_is_new=after["whose"] == "new")
            rows.append(row)
            print(f"run {i:2d} {'--force ' if force else '        '}kill at {at:5.2f} s  killed {row['killed']!s:5}  "
                  f"looks complete {row['looks_complete']!s:5}  verifies {row['verifies']!s:5}  "
                  f"whose {row['whose']!s:8}  siblings {row['siblings_left']}  "
                  f"-> rerun rc {again['rc']} siblings {after['siblings_left']}", flush=True)
    summary = {
        "runs": len(rows),
        "killed": sum(r["killed"] for r in rows),
        "looked_complete": sum(r["looks_complete"] for r in rows),
        "torn (looked complete, failed to verify or unknown)": sum(
            r["looks_complete"] and (not r["verifies"] or r["whose"] == "other") for r in rows),
        "siblings_left_by_kill": sum(r["siblings_left"] > 0 for r in rows),
        "rerun_failed": sum(r["rerun_rc"] != 0 or not r["rerun_is_new"] for r in rows),
        "siblings_after_rerun": sum(r["siblings_after_rerun"] for r in rows),
    }
    print()
    for k, v in summary.items():
        print(f"{k:<55}{v:>5}")
    out_path = Path(a.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps({"config": vars(a), "reference_wall_s": wall, "writing_s": [write_start, write_end],
                                    "summary": summary, "runs": rows},
                                   indent=1))
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main()
