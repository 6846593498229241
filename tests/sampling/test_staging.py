"""Batches reach a device without blocking its step: the ordering of copies, events and waits (``sampling.staging``).

No GPU here: the streams are fakes that log what happens in which order, and the "device" is
``meta`` (tensors without storage, so a copy there is real but free).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch

from graphdist.testing import random_graph
from sampling import NeighborSampler, NodeLoader
from sampling.staging import READY, DeviceStager, on_device


class FakeEvent:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name, self.done = log, name, False

    def record(self, stream: "FakeStream") -> None:
        self.log.append(("record", self.name, stream.name, threading.current_thread().name))

    def synchronize(self) -> None:
        self.log.append(("host-wait", self.name))
        self.done = True


class FakeStream:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def wait_event(self, event: FakeEvent) -> None:
        self.log.append(("stream-wait", self.name, event.name))

    def synchronize(self) -> None:  # what staging must never call on the step's stream
        self.log.append(("stream-sync", self.name))


class FakeOps:
    def __init__(self) -> None:
        self.log: list = []
        self.local = threading.local()  # a thread's current stream is its own, as CUDA's is
        self.events = 0

    @property
    def current(self) -> list[FakeStream]:
        if not hasattr(self.local, "stack"):
            self.local.stack = [FakeStream(self.log, "default")]
        return self.local.stack

    def side_stream(self, device: torch.device) -> FakeStream:
        self.log.append(("new-stream", "side"))
        return FakeStream(self.log, "side")

    def current_stream(self, device: torch.device) -> FakeStream:
        return self.current[-1]

    @contextlib.contextmanager
    def use(self, stream: FakeStream) -> Iterator[None]:
        self.current.append(stream)
        try:
            yield
        finally:
            self.current.pop()

    def new_event(self) -> FakeEvent:
        self.events += 1
        return FakeEvent(self.log, f"e{self.events}")

    def record(self, tensor: torch.Tensor, stream: FakeStream) -> None:
        self.log.append(("record-stream", stream.name))


def _batch() -> Any:
    g = random_graph(50, seed=0)
    batch = NeighborSampler(g, [3, 2], seed=0).sample(torch.arange(5))
    batch.x = g.x.index_select(0, batch.input_nodes)
    return batch


def test_stage_copies_on_the_side_stream_and_the_step_waits_on_the_event() -> None:
    ops = FakeOps()
    moved, event = DeviceStager(torch.device("meta"), ops).stage(_batch())
    assert moved.x.device.type == "meta" and moved.blocks[0].src.device.type == "meta"
    assert moved.meta[READY] is event
    assert ops.log[:2] == [("new-stream", "side"), ("record", "e1", "side", threading.current_thread().name)]
    ops.log.clear()
    assert on_device(moved, torch.device("meta"), ops) is moved
    # The step's stream waits on the GPU for the copy, then marks every tensor as its own; the host never waits.
    assert ops.log[0] == ("stream-wait", "default", "e1")
    tensors = 2 * 3 + 3  # two blocks' src, dst, indptr; input and seed ids, x (no labels, no edge weights)
    assert ops.log[1:] == [("record-stream", "default")] * tensors
    assert not any(entry[0] in ("host-wait", "stream-sync") for entry in ops.log)


def test_an_unstaged_batch_is_copied_and_a_cpu_one_is_left_alone() -> None:
    batch = _batch()
    assert on_device(batch, torch.device("cpu")) is batch
    moved = on_device(batch, torch.device("meta"))
    assert moved.x.device.type == "meta" and READY not in moved.meta


def test_loader_stages_in_its_prefetch_thread_and_reuses_a_buffer_only_after_its_copy() -> None:
    g = random_graph(200, seed=1)
    ops = FakeOps()
    loader = NodeLoader(g, torch.arange(200), NeighborSampler(g, [3, 2], seed=0), batch_size=16, seed=0,
                        device="meta", stream_ops=ops, prefetch=True)
    batches = [on_device(b, torch.device("meta"), ops) for b in loader]
    assert len(batches) == 13 and all(b.x.device.type == "meta" and READY in b.meta for b in batches)
    records = [e for e in ops.log if e[0] == "record"]
    assert len(records) == 13 and all(thread == "graphdist-prefetch" for *_, thread in records)
    assert not any(e[0] == "stream-sync" for e in ops.log)
    # The ring has prefetch_depth + 3 = 4 buffers: batch k's buffer is taken again for batch k + 4, and
    # only after the host waited for batch k's copy (its event), in the prefetch thread.
    waits = [e[1] for e in ops.log if e[0] == "host-wait"]
    assert waits == [f"e{k}" for k in range(1, 13 - 4 + 1)]
    for k in range(1, 13 - 4 + 1):
        assert ops.log.index(("host-wait", f"e{k}")) < next(
            i for i, e in enumerate(ops.log) if e[0] == "record" and e[1] == f"e{k + 4}")


def test_staged_and_plain_batches_hold_the_same_values() -> None:
    g = random_graph(120, seed=2)

    def run(**kw: Any) -> list:
        loader = NodeLoader(g, torch.arange(120), NeighborSampler(g, [4], seed=3), batch_size=32, seed=5,
                            prefetch=True, **kw)
        return [(b.input_nodes.clone(), b.seed_nodes.clone(), b.y.clone()) for b in loader]

    # "cpu" through the stager (fake streams) against no device at all: the same batches.
    for (a, b) in zip(run(), run(device="cpu", stream_ops=FakeOps())):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
