"""A rank's exit: no gloo worker thread outlives the process groups into the interpreter's finalisation.

A gloo worker thread that is still releasing a finished collective's tensors when the interpreter
finalises aborts the process ("terminate called without an active exception": the thread asks for
the GIL and a finalising interpreter ends it). It happened about once in twenty emulated-cluster
runs. The default group was kept alive by torch modules imported after it (their default
arguments hold it) and sampling groups by reference cycles; with every group destroyed before
finalisation, no such thread is left. Real processes, not forks of the test: a fork's child never
finalises (multiprocessing ends it with ``os._exit``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from graphdist.testing import require

RANK = textwrap.dedent("""
    import atexit, os, sys
    import torch

    def gloo_threads():
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
        return sum(n.startswith(("pt_gloo", "gloo")) for n in names)

    # Registered first, so it runs last: after graphdist's own exit hook, just before finalisation.
    atexit.register(lambda: print("at exit:", gloo_threads(), flush=True))
    from graphdist import comm

    rank, world, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    comm.init_process_group(rank, world, init, timeout_s=20)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))])  # imports torch._dynamo once the group exists
    comm.all_gather_object(rank)
    comm.all_reduce_async(torch.ones(4)).wait()
    cycle = {"group": comm.new_group()}
    cycle["self"] = cycle  # a group that only a reference cycle keeps, as a dropped strategy's
    comm.all_reduce(torch.ones(2), group=cycle["group"])
    print("before shutdown:", gloo_threads(), flush=True)
    comm.shutdown()
    del cycle
""")


def test_no_gloo_thread_left_at_exit(tmp_path):
    require(os.path.isdir("/proc/self/task"), "thread names are read from /proc (Linux)")
    init = f"file://{tmp_path / 'store'}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), "2", init], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for r in range(2)]
    outs = [p.communicate(timeout=100)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
        counts = {line.split(":")[0]: int(line.split(":")[1]) for line in out.splitlines()
                  if line.startswith(("before shutdown:", "at exit:"))}
        assert counts["before shutdown"] > 0, out  # the threads are there to be seen while the groups live
        assert counts["at exit"] == 0, out
