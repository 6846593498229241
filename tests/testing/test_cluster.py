"""The emulated cluster: reachability, isolation, rate limit, cut/restore, cleanup (needs root + iproute2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from graphdist.testing.netns import (
    ClusterUnavailable,
    EmulatedCluster,
    list_namespaces,
    netem_available,
    parse_rate,
    torchrun_argv,
    unavailable_reason,
)
from graphdist.testing.env import require

# Connects from inside a host; prints "ok" or the errno name. A 2 s timeout tells silence from refusal.
CONNECT = (
    "import errno, socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close(); print('ok')\n"
    "except socket.timeout:\n"
    "    print('timeout')\n"
    "except OSError as e:\n"
    "    print(errno.errorcode.get(e.errno, str(e)))\n"
)
LISTEN = "import socket, sys, time\ns = socket.create_server((sys.argv[1], int(sys.argv[2])))\nwhile True: s.accept()\n"


@pytest.fixture
def needs_cluster():
    reason = unavailable_reason()
    require(reason is None, reason or "")


def _connect(c: EmulatedCluster, src: int, addr: str, port: int) -> str:
    return c.check_output(src, [sys.executable, "-c", CONNECT, addr, str(port)]).strip()


def _listen(c: EmulatedCluster, host: int, port: int) -> subprocess.Popen:
    proc = c.run(host, [sys.executable, "-c", LISTEN, c.addr(host), str(port)])
    deadline = time.monotonic() + 20
    while _connect(c, host, c.addr(host), port) != "ok":  # wait until it listens (checked from its own host)
        assert time.monotonic() < deadline, "listener did not start"
        time.sleep(0.1)
    return proc


def test_parse_rate_and_recipe():
    assert parse_rate("100mbit") == 100_000_000 and parse_rate("1gbit") == 10**9 and parse_rate(None) is None
    with pytest.raises(ValueError, match="100mbit"):
        parse_rate("100 mbps")
    argv = torchrun_argv(2, 2, "10.213.0.1", 29400, False, "10.213.0.2", ["-m", "x"], python="py")
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=false"
    assert argv[argv.index("--local-addr") + 1] == "10.213.0.2"


def test_unavailable_reason_is_one_line():
    reason = unavailable_reason()
    assert reason is None or ("\n" not in reason and reason)


def test_hosts_reach_each_other_and_nothing_else(needs_cluster):
    root_links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    root_routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    with EmulatedCluster(hosts=2) as c:
        assert len([n for n in list_namespaces() if n.startswith(c.name)]) == 3  # 2 hosts + the switch
        _listen(c, 1, 7001)
        assert _connect(c, 0, c.addr(1), 7001) == "ok"
        # No route out of the test subnet: a connect to anything else fails locally, no packet is sent
        # (192.0.2.1 is TEST-NET-1; the machine's own namespace is unreachable too).
        assert _connect(c, 0, "192.0.2.1", 80) == "ENETUNREACH"
        assert "default" not in c.check_output(0, ["ip", "route"])
        # The machine's own interfaces and routes did not change.
        assert subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout == root_links
        assert subprocess.run(["ip", "route"], capture_output=True, text=True).stdout == root_routes
    assert not [n for n in list_namespaces() if n.startswith(c.name)]


def _tbf(c: EmulatedCluster, host: int) -> dict:
    """Host ``host``'s token bucket as ``tc -s`` reports it: its options (rate in bytes/s) and counters."""
    import json

    (qdisc,) = json.loads(c.check_output(host, ["tc", "-j", "-s", "qdisc", "show", "dev", c.iface(host)]))
    assert qdisc["kind"] == "tbf", qdisc
    return qdisc


def test_rate_limit_holds_the_link_to_its_rate(needs_cluster):
    # 30 MB at 100 Mbit/s is ~2.4 s: long enough that the token bucket's burst does not count.
    # A busy machine can only slow the stream, so the test bounds it from above (the shaper) and asks
    # the shaper, not a clock, whether it set the pace; how close to 100 Mbit/s the stream gets is a
    # performance number: bench/bench_simulator.py measures each --rates link (its `link_bps`).
    nbytes, rate = 30_000_000, 100e6
    with EmulatedCluster(hosts=2, rate="100mbit") as c:
        assert _tbf(c, 0)["options"]["rate"] == rate / 8  # bytes/s: the rate asked, in tc's units
        tx0, held0 = c.link_stats(0).tx_bytes, _tbf(c, 0)["overlimits"]
        start = time.monotonic()
        bps = c.measure_throughput(0, 1, nbytes)
        took = time.monotonic() - start  # the transfer and more: process starts, the receiver's report
        assert c.link_stats(0).tx_bytes - tx0 >= nbytes  # it crossed the shaped interface
        held = _tbf(c, 0)["overlimits"] - held0
    assert held > 0, "the bucket never held a packet back: something slower than the link set the pace"
    # Not faster than the link: at most rate x time + one bucket crossed it (unshaped: ~1.5 Gbit/s here).
    assert 8 * nbytes / took <= 1.3 * rate, f"{nbytes} B in {took:.2f} s on a 100mbit link ({bps / 1e6:.0f} Mbit/s)"


def test_cut_and_restore(needs_cluster):
    with EmulatedCluster(hosts=2, rate="1gbit") as c:
        _listen(c, 1, 7002)
        c.cut(1)
        assert _connect(c, 0, c.addr(1), 7002) != "ok"
        c.restore(1)
        deadline = time.monotonic() + 15
        while _connect(c, 0, c.addr(1), 7002) != "ok":
            assert time.monotonic() < deadline, "link did not come back after restore"
            time.sleep(0.2)


def test_no_namespace_or_process_left_when_body_raises(needs_cluster):
    marker = f"gdc-escape-{os.getpid()}-{time.monotonic_ns()}"
    with pytest.raises(RuntimeError, match="body failed"):
        with EmulatedCluster(hosts=2, rate="300mbit") as c:
            sleeper = c.run(1, ["sleep", "600"])
            # A grandchild in a session of its own escapes the process group; the namespace sweep gets it.
            c.run(0, ["setsid", "sh", "-c", f"sleep 600; : {marker}"])
            deadline = time.monotonic() + 10
            while not _running(marker):
                assert time.monotonic() < deadline, "escaped process did not start"
                time.sleep(0.05)
            raise RuntimeError("body failed")
    assert not [n for n in list_namespaces() if n.startswith(c.name)]
    assert sleeper.poll() is not None
    assert not _running(marker)


def _running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def test_stale_namespaces_of_dead_owners_are_removed(needs_cluster):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"gdc-{dead.pid}-0-h0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    victim = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "600"])
    try:
        with EmulatedCluster(hosts=1):
            assert stale not in list_namespaces()
        assert victim.wait(timeout=10) != 0  # killed by the sweep
    finally:
        if victim.poll() is None:
            victim.kill()
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)


def test_delay_or_loss_needs_netem(needs_cluster):
    if netem_available():  # not on this machine's kernel; elsewhere delay must simply work
        with EmulatedCluster(hosts=2, delay="5ms") as c:
            assert "netem" in c.check_output(0, ["tc", "qdisc", "show", "dev", c.iface(0)])
        return
    with pytest.raises(ClusterUnavailable, match="no netem"):
        with EmulatedCluster(hosts=2, delay="5ms"):
            pass


def test_each_host_runs_on_its_own_cores(needs_cluster):
    require(len(os.sched_getaffinity(0)) >= 2, "needs 2 usable cores to give 2 hosts one each")
    with pytest.raises(ValueError, match="host_cores: Expected one non-empty core list per host"):
        EmulatedCluster(hosts=2, host_cores=[[0]])
    cores = sorted(os.sched_getaffinity(0))[:2]
    with EmulatedCluster(hosts=2, host_cores=[[cores[0]], [cores[1]]]) as c:
        seen = []
        for h in range(2):
            p = c.run(h, [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                      stdout=subprocess.PIPE)
            out, _ = p.communicate(timeout=30)
            seen.append(out.decode().strip())
    assert seen == [f"[{cores[0]}]", f"[{cores[1]}]"]
