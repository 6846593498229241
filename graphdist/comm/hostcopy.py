"""A CUDA tensor's copy to host memory that the calling thread does not wait for.

gloo moves host memory. For the collectives gloo runs on CUDA tensors itself (allreduce,
broadcast, all-to-all: its CUDA work classes copy through pinned memory on a stream of their
own) graphdist hands the CUDA tensor over as it is (``collectives._staged``). For the rest
(point-to-point sends, the threaded algorithms, int8, SACP's factors) :class:`HostCopy` starts
the copy where the tensor is ready (a gradient hook) and the communication thread waits for it:
a side stream waits on an event of the producer's stream, copies into pinned memory, and records
an event that :meth:`HostCopy.wait` synchronises. The hook returns at once; the GPU's own stream
never waits for the host.

Example (a host tensor needs no copy):
    >>> import torch
    >>> t = torch.ones(3)
    >>> HostCopy(t).wait() is t
    True
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

__all__ = ["HostCopy"]


@functools.lru_cache(maxsize=None)
def _copy_stream(device: torch.device) -> Any:
    """One stream per device for device-to-host copies (made once, used from any thread)."""
    return torch.cuda.Stream(device=device)


class HostCopy:
    """``tensor``'s values in host memory: a CUDA tensor's copy is started now and finished by :meth:`wait`.

    Start it in the thread that produced the tensor (the copy waits for that thread's stream as it
    is now, not for work queued later); call :meth:`wait` in the thread that sends it. A host
    tensor is its own copy.
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        self._done: Optional[Any] = None
        if not tensor.is_cuda:
            self._host = tensor
            return
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(tensor.device))
        stream = _copy_stream(tensor.device)
        with torch.cuda.stream(stream):
            stream.wait_event(ready)
            self._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self._host.copy_(tensor, non_blocking=True)
            tensor.record_stream(stream)  # the producer may free it before the copy ran
            self._done = torch.cuda.Event()
            self._done.record(stream)

    def wait(self) -> torch.Tensor:
        """The host tensor, once the copy has finished (this thread waits; no stream does)."""
        if self._done is not None:
            self._done.synchronize()
            self._done = None
        return self._host
