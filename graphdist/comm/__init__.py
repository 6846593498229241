"""The only code in graphdist that calls ``torch.distributed``.

Process-group set-up with a timeout, role helpers, and (added by later work)
collectives that name the rank and operation on failure and count bytes.

Example:
    >>> from graphdist import comm
    >>> comm.is_initialized()
    False
"""

from graphdist.comm.collectives import (
    COUNTER,
    Handle,
    all_gather_object,
    all_reduce,
    all_reduce_async,
    all_to_all_counts_async,
    all_to_all_v,
    all_to_all_v_async,
    broadcast,
    broadcast_object,
    byte_counts,
    ddp_wrap,
    new_group,
    reset_byte_counts,
    time_counts,
)
from graphdist.comm.group import (
    CommError,
    barrier,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
    is_main_process,
    shutdown,
)

__all__ = [
    "COUNTER",
    "Handle",
    "all_gather_object",
    "all_reduce",
    "all_reduce_async",
    "all_to_all_counts_async",
    "all_to_all_v",
    "all_to_all_v_async",
    "broadcast",
    "broadcast_object",
    "byte_counts",
    "ddp_wrap",
    "new_group",
    "reset_byte_counts",
    "time_counts",
    "CommError",
    "barrier",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "is_main_process",
    "shutdown",
]
