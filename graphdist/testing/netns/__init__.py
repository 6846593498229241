"""An emulated cluster on one machine: hosts as network namespaces, links with a rate limit.

Loopback hides what makes distributed training hard (gloo moves ~1.6 GB/s over
``lo`` here). :class:`EmulatedCluster` makes H "hosts", each a Linux network
namespace with its own address in a private test subnet, wired to a bridge in
a "switch" namespace through one veth pair per host. Each host's link is
shaped in both directions by a token bucket (``tc ... tbf``), so a job started
in the hosts (:meth:`EmulatedCluster.run`, :meth:`EmulatedCluster.torchrun`)
really crosses a limited link, and :meth:`EmulatedCluster.cut` /
:meth:`EmulatedCluster.restore` unplug a host and plug it back::

    root namespace (untouched)
    gdc-<pid>-<n>-sw:  br0 ── p0 ── p1 ── ...          the switch
                             │     │
    gdc-<pid>-<n>-h0:  eth0 10.213.0.1/24  (tbf rate)   host 0
    gdc-<pid>-<n>-h1:  eth0 10.213.0.2/24  (tbf rate)   host 1

What it touches: only the namespaces it creates. Every veth is created inside
the switch namespace and its host end moved straight into the host namespace,
so the machine's own interfaces, addresses and routes never change; a host
namespace has a route to the test subnet only (no default route), so a
process in it can reach the other hosts and nothing else. On exit (also after
an exception, SIGTERM, or interpreter exit) it stops every process it started
and everything still running inside its namespaces, then deletes the
namespaces (which deletes their veths). Namespaces of a *dead* process with
this prefix (a test that was SIGKILLed) are removed when the next cluster starts.

Limits: needs root and iproute2 (``ip``, ``tc``); :func:`unavailable_reason`
says in one line what is missing. This machine's kernel has no ``sch_netem``,
so there is no delay or loss emulation: asking for ``delay``/``loss`` raises
:class:`ClusterUnavailable` saying so (on a kernel with netem it is used).

Example::

    with EmulatedCluster(hosts=2, rate="100mbit") as c:
        c.run(1, ["python", "-m", "http.server", "8000", "--bind", c.addr(1)])
        c.check_output(0, ["python", "-c", f"import urllib.request as u; u.urlopen('http://{c.addr(1)}:8000')"])

Rates are tc's, in bits per second; this part needs no root:

    >>> parse_rate("100mbit")
    100000000

Modules: :mod:`~graphdist.testing.netns.cluster` (:class:`EmulatedCluster`, :class:`Host`),
:mod:`~graphdist.testing.netns.torchrun` (:func:`torchrun_argv`, :class:`TorchrunJob`),
:mod:`~graphdist.testing.netns.iproute` (``ip``/``tc`` commands, availability checks, stale
namespace cleanup) and ``_netprobe.py``, the throughput probe run as a script inside the hosts.
"""

from graphdist.testing.netns.cluster import EmulatedCluster, Host, LinkStats, own_tx_bytes
from graphdist.testing.netns.iproute import (
    ClusterError,
    ClusterUnavailable,
    list_namespaces,
    netem_available,
    parse_rate,
    remove_stale,
    unavailable_reason,
)
from graphdist.testing.netns.torchrun import TorchrunJob, torchrun_argv

__all__ = [
    "ClusterError",
    "ClusterUnavailable",
    "EmulatedCluster",
    "Host",
    "LinkStats",
    "TorchrunJob",
    "list_namespaces",
    "netem_available",
    "own_tx_bytes",
    "parse_rate",
    "remove_stale",
    "torchrun_argv",
    "unavailable_reason",
]
