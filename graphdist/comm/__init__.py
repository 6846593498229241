"""The only code in graphdist that calls ``torch.distributed``.

- ``group``: process-group set-up with a timeout, role helpers (``is_main_process``).
- ``collectives``: gather, broadcast, handles and futures, the shared error and timeout handling;
  ``alltoall``: the variable-size all-to-all. Errors name the rank.
- ``algorithms``: allreduce algorithms as callables ``algorithm(tensor, group, tag) -> Handle``
  (``ring``, ``auto``; ``halving``: halving-doubling and hierarchical; ``rankmap``: their pure rank maps;
  ``p2p``: their point-to-point steps and thread).
- ``topology``: which ranks share a host (``Topology``, ``discover_topology``).
- ``counters``: bytes sent per purpose tag, and the part that crosses hosts.
- ``ddp``: torch DDP over a graphdist group, with a communication hook.
- ``hostcopy``: a CUDA tensor's copy to host memory that the calling thread does not wait for.
- ``loader_groups``: the sampling groups of loader processes (loader k of every worker in one).

Example:
    >>> from graphdist import comm
    >>> comm.is_initialized()
    False
"""

from graphdist.comm.algorithms import (
    ALLREDUCE_ALGORITHMS,
    AllreduceAlgorithm,
    Auto,
    HalvingDoubling,
    Hierarchical,
    Ring,
    all_gather_rows_async,
    all_reduce,
    all_reduce_async,
    allreduce_algorithm,
)
from graphdist.comm.alltoall import (all_to_all_counts_async, all_to_all_v, all_to_all_v_async, exchange_rows,
                                     joined_rows, pack_rows, unpack_rows)
from graphdist.comm.collectives import (
    Handle,
    all_gather_object,
    broadcast,
    broadcast_object,
    comm_failure,
    group_size,
    injection_point,
    new_group,
    start_all_reduce,
    wait_future,
)
from graphdist.comm.counters import (
    COUNTER,
    byte_counts,
    call_counts,
    inter_host_byte_counts,
    reset_byte_counts,
    time_counts,
)
from graphdist.comm.ddp import ddp_unwrap, ddp_wrap, torch_compress_wrapper
from graphdist.comm.hostcopy import HostCopy
from graphdist.comm.loader_groups import LoaderGroups, join_loader_group, loader_rendezvous
from graphdist.comm.p2p import AlgorithmThread, channel
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
from graphdist.comm.topology import Topology, discover_topology

__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "AlgorithmThread",
    "AllreduceAlgorithm",
    "Auto",
    "COUNTER",
    "CommError",
    "HalvingDoubling",
    "HostCopy",
    "LoaderGroups",
    "Handle",
    "Hierarchical",
    "Ring",
    "Topology",
    "all_gather_object",
    "all_gather_rows_async",
    "all_reduce",
    "all_reduce_async",
    "all_to_all_counts_async",
    "all_to_all_v",
    "all_to_all_v_async",
    "exchange_rows",
    "allreduce_algorithm",
    "barrier",
    "broadcast",
    "broadcast_object",
    "channel",
    "byte_counts",
    "call_counts",
    "comm_failure",
    "ddp_unwrap",
    "ddp_wrap",
    "discover_topology",
    "get_rank",
    "get_world_size",
    "group_size",
    "init_process_group",
    "injection_point",
    "inter_host_byte_counts",
    "is_initialized",
    "is_main_process",
    "join_loader_group",
    "joined_rows",
    "pack_rows",
    "unpack_rows",
    "loader_rendezvous",
    "new_group",
    "reset_byte_counts",
    "shutdown",
    "start_all_reduce",
    "time_counts",
    "torch_compress_wrapper",
    "wait_future",
]
