"""A one-stream TCP throughput probe run inside emulated hosts (``EmulatedCluster.measure_throughput``).

Run as a script (stdlib only, so it starts in milliseconds inside a namespace)::

    python _netprobe.py recv ADDR PORT          # prints {"bytes": N, "seconds": T}
    python _netprobe.py send ADDR PORT NBYTES

The receiver times from the first byte to the last, so connection set-up is not counted.
"""

from __future__ import annotations

import json
import socket
import sys
import time


def recv(addr: str, port: int, timeout_s: float = 120.0) -> dict[str, float]:
    """Accepts one connection on ``addr:port``, reads to EOF; returns bytes and first-to-last-byte seconds."""
    with socket.create_server((addr, port), reuse_port=False) as server:
        server.settimeout(timeout_s)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(timeout_s)
            total, first, last = 0, None, None
            buf = bytearray(1 << 20)
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                now = time.perf_counter()
                first = now if first is None else first
                last = now
                total += n
    return {"bytes": total, "seconds": (last - first) if first is not None else 0.0}


def send(addr: str, port: int, nbytes: int, connect_timeout_s: float = 20.0) -> None:
    """Connects to ``addr:port`` (retrying while the receiver starts) and sends ``nbytes`` zeros."""
    deadline = time.monotonic() + connect_timeout_s
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=5.0)
            break
        except (ConnectionRefusedError, socket.timeout):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    chunk = bytes(1 << 20)
    with sock:
        sock.settimeout(120.0)
        left = nbytes
        while left > 0:
            n = min(left, len(chunk))
            sock.sendall(chunk[:n])
            left -= n


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "recv":
        print(json.dumps(recv(argv[1], int(argv[2]))), flush=True)
        return 0
    if len(argv) >= 4 and argv[0] == "send":
        send(argv[1], int(argv[2]), int(argv[3]))
        return 0
    print("usage: _netprobe.py recv ADDR PORT | send ADDR PORT NBYTES", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
