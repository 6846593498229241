"""Mid-epoch checkpoints are written on a thread of their own: training goes on while the file is written.

The writer copies the state when it is handed over (later steps do not leak into the file), writes one
checkpoint at a time, raises a failed write at the next hand-over or wait with the previous checkpoint
intact, and finishes a write in flight before a process that ends at once (comm's peer watch) exits.
"""

from __future__ import annotations

import errno
import os
import threading

import pytest
import torch

import graphdist.checkpoint as ckpt
from graphdist import plugins
from graphdist.checkpoint import CheckpointWriter, checkpoint_state, load_checkpoint


def _model_and_state(value: float, epoch: int) -> tuple[torch.nn.Module, dict]:
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(value)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    return model, checkpoint_state(model, opt, epoch, extra={"note": [value]})


@pytest.fixture
def gated(monkeypatch):
    """The writer's file write held until the test opens the gate."""
    gate, started = threading.Event(), threading.Event()
    real = ckpt.atomic_write_bytes

    def held(buffer, path):
        started.set()
        assert gate.wait(30), "the gate was never opened"
        real(buffer, path)

    monkeypatch.setattr(ckpt, "atomic_write_bytes", held)
    return gate, started


def test_submit_returns_before_the_write_and_the_file_holds_the_state_as_handed_over(tmp_path, gated):
    gate, started = gated
    path = tmp_path / "checkpoint.pt"
    model, state = _model_and_state(1.0, epoch=2)
    recorded = []
    writer = CheckpointWriter()
    writer.submit(state, path, then=lambda: recorded.append("status"))
    assert started.wait(10) and writer.busy and not path.exists()
    with torch.no_grad():  # training goes on: the next steps change the live parameters
        model.weight.add_(5.0)
    assert plugins.hook("before_exit") is not None  # a write is in flight
    gate.set()
    writer.wait()
    saved = load_checkpoint(path)
    assert saved["epoch"] == 2 and torch.equal(saved["model"]["weight"], torch.ones(2, 3))
    assert recorded == ["status"] and not writer.busy and plugins.hook("before_exit") is None


def _held_write(gated, path, epoch: int) -> CheckpointWriter:
    """A writer whose write of epoch ``epoch``'s checkpoint has started and is held at the gate."""
    writer = CheckpointWriter()
    writer.submit(_model_and_state(1.0, epoch=epoch)[1], path)
    assert gated[1].wait(10)
    return writer


def test_a_second_checkpoint_waits_for_the_first_so_they_land_in_order(tmp_path, gated):
    path = tmp_path / "checkpoint.pt"
    writer = _held_write(gated, path, epoch=1)
    threading.Timer(0.2, gated[0].set).start()
    writer.submit(_model_and_state(2.0, epoch=2)[1], path)  # blocks until the first landed
    writer.wait()
    assert load_checkpoint(path)["epoch"] == 2


def test_a_failed_write_is_raised_at_the_next_wait_and_the_previous_checkpoint_stays(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    writer = CheckpointWriter()
    writer.submit(_model_and_state(1.0, epoch=1)[1], path)
    writer.wait()
    before = path.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    writer.submit(_model_and_state(2.0, epoch=2)[1], path)  # returns: the failure comes later
    with pytest.raises(OSError, match=r"no space left on device.*the previous checkpoint.pt is intact"):
        writer.wait()
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    writer.wait()  # raised once: the writer is usable again


def test_a_process_ending_at_once_finishes_the_write_in_flight_within_a_bound(tmp_path, gated):
    path = tmp_path / "checkpoint.pt"
    writer = _held_write(gated, path, epoch=4)
    writer._finish_quietly(timeout_s=0.1)  # a hung file system: the dying rank waits no longer than the bound
    assert writer.busy and not path.exists()
    threading.Timer(0.2, gated[0].set).start()
    plugins.call("before_exit")  # what comm's peer watch calls before os._exit
    assert load_checkpoint(path)["epoch"] == 4
    writer.wait()
    plugins.call("before_exit")  # nothing in flight: the hook is gone, the call is a no-op
