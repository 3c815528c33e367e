"""Collectives over mesh dimensions, on one proc: torch.distributed process groups, or messages.

A reduction names a group of procs (those of a mesh that differ only along
the reduced dimensions; the controller defines them, `GROUPS`). On a real
transport each stream of each proc makes one torch.distributed process group
per group the first time it reduces over it (gloo for CPU tensors, NCCL for
CUDA ones), meeting the others at the mesh's store (`danaus.tensor.store`).
On the simulator, where every proc lives in one thread, a group cannot block
in gloo: each proc sends its part to the others in Danaus messages, over the
simulated network (so chaos reaches it), and every proc combines the parts in
rank order. Both give every proc of a group the same result; a sum over more
than two procs may differ between the two in the last bits, as gloo adds in
an order of its own.
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import socket
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from danaus.tensor.store import MessageStore

if TYPE_CHECKING:
    from danaus.tensor.executor import Executor
    from danaus.tensor.worker import WorkerState

GROUP_TIMEOUT = datetime.timedelta(seconds=120)
"""How long a collective waits for the other procs of its group (gloo's timeout)."""

REDUCTIONS = ("sum", "avg", "product", "min", "max", "stack")

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}


class Collectives:
    """The collectives of one proc's tensor worker."""

    def __init__(self, state: WorkerState) -> None:
        self._state = state
        self._groups: dict[tuple[Any, ...], Any] = {}
        self._rounds: dict[tuple[Any, ...], itertools.count[int]] = {}
        self._stores: list[MessageStore] = []

    def reduce(self, executor: Executor, command: tuple[Any, ...]) -> None:
        _, group_id, src, out, reduction, scatter = command
        members = self._state.groups[group_id]
        tensor = executor.lookup(src)
        if self._state.isolated is None:
            result = self._on_process_group(
                executor, members, tensor, reduction, scatter, out is None
            )
        else:
            result = self._by_messages(executor, members, tensor, reduction, scatter)
        target = tensor if out is None else executor.table.get(out)
        if result is target:
            return
        if isinstance(target, torch.Tensor) and target.shape == result.shape:
            target.copy_(result)  # in place, or into an existing ``out``: its views see it
        else:
            executor.table[out] = result

    def process_group(self, executor: Executor, group_id: int) -> Any:
        """This stream's process group for group ``group_id`` (a remote function's argument)."""
        members = self._state.groups[group_id]
        if self._state.isolated is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            return self._group(executor, members, device)
        return MessageGroup(self, executor, members)

    def close(self) -> None:
        self._groups.clear()
        self._stores.clear()

    def _on_process_group(
        self,
        executor: Executor,
        members: tuple[int, ...],
        tensor: torch.Tensor,
        reduction: str,
        scatter: bool,
        inplace: bool,
    ) -> torch.Tensor:
        group = self._group(executor, members, tensor.device.type)
        size = len(members)
        if reduction == "stack":
            source = tensor.contiguous()
            if scatter:
                output = torch.empty_like(source)
                group.alltoall_base(output, source, [], []).wait()
                return output
            parts = [torch.empty_like(source) for _ in members]
            group.allgather([parts], [source]).wait()
            return torch.stack(parts)
        if inplace and tensor.is_contiguous():
            buffer = tensor
        else:
            buffer = tensor.clone(memory_format=torch.contiguous_format)
        options = dist.AllreduceOptions()
        options.reduceOp = _OPS[reduction]
        group.allreduce([buffer], options).wait()
        if reduction == "avg":
            buffer = _divided(buffer, size)
        return buffer[members.index(self._state.rank)] if scatter else buffer

    def _group(self, executor: Executor, members: tuple[int, ...], device: str) -> Any:
        key = (executor.sid, members, device)
        group = self._groups.get(key)
        if group is None:
            prefix = f"{self._state.mesh_id}/{executor.sid}/{device}/" + "-".join(map(str, members))
            procs = [self._state.proc_of(rank) for rank in members]
            meeting = MessageStore(self._state.peer(0), self._state.runtime, procs)
            # torch holds the store in C++ only; without a reference here the Python object
            # would go, and torch could no longer call its methods.
            self._stores.append(meeting)
            store = dist.PrefixStore(prefix, meeting)
            rank, size = members.index(self._state.rank), len(members)
            if device == "cuda":
                group = dist.ProcessGroupNCCL(store, rank, size)
            else:
                options = dist.ProcessGroupGloo._Options()
                options._devices = [dist.ProcessGroupGloo.create_device(hostname=self._address())]
                options._timeout = GROUP_TIMEOUT
                group = dist.ProcessGroupGloo(store, rank, size, options)
            self._groups[key] = group
        return group

    def _address(self) -> str:
        """Where gloo listens on this proc: the address Danaus's own connections use."""
        address = self._state.runtime.transport.host_address
        try:
            unspecified = ipaddress.ip_address(address).is_unspecified
        except ValueError:
            unspecified = False
        return socket.gethostbyname(socket.gethostname()) if unspecified else address

    def exchange(
        self, executor: Executor, members: tuple[int, ...], parts: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Send ``parts[j]`` to member ``j``; return what each member sent this proc, in rank
        order (this proc's own part included)."""
        state = self._state
        counter = self._rounds.setdefault((executor.sid, members), itertools.count())
        key = (executor.sid, members, next(counter))
        mine = members.index(state.rank)
        for index, rank in enumerate(members):
            if rank != state.rank:
                state.peer(rank).deliver.broadcast((key, state.rank), parts[index].detach())
        received = []
        for rank in members:
            if rank == state.rank:
                received.append(parts[mine])
            else:
                future = state.inbox.take((key, rank), state.proc_of(rank))
                received.append(executor.wait(future))
        return received

    def _by_messages(
        self,
        executor: Executor,
        members: tuple[int, ...],
        tensor: torch.Tensor,
        reduction: str,
        scatter: bool,
    ) -> torch.Tensor:
        size = len(members)
        parts = list(tensor.unbind(0)) if scatter else [tensor] * size
        received = self.exchange(executor, members, [p.contiguous() for p in parts])
        if reduction == "stack":
            return torch.stack(received)
        return combine(received, reduction)


def combine(parts: list[torch.Tensor], reduction: str) -> torch.Tensor:
    """The parts reduced in rank order."""
    total = parts[0].clone()
    for part in parts[1:]:
        if reduction in ("sum", "avg"):
            total.add_(part)
        elif reduction == "product":
            total.mul_(part)
        elif reduction == "min":
            torch.minimum(total, part, out=total)
        else:
            torch.maximum(total, part, out=total)
    return _divided(total, len(parts)) if reduction == "avg" else total


def _divided(total: torch.Tensor, size: int) -> torch.Tensor:
    if total.is_floating_point() or total.is_complex():
        return total.div_(size)
    return total.div_(size, rounding_mode="floor")


class MessageGroup(dist.ProcessGroup):
    """A process group on the simulator: torch.distributed's calls, carried by `exchange`.

    It has what remote functions usually call: ``allreduce``, ``allgather``,
    ``broadcast`` and ``barrier`` (``torch.distributed.all_reduce(t, group=pg)``
    and the like).
    """

    def __init__(
        self, collectives: Collectives, executor: Executor, members: tuple[int, ...]
    ) -> None:
        super().__init__(members.index(collectives._state.rank), len(members))
        self._collectives = collectives
        self._executor = executor
        self._members = members

    def _exchange(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self._collectives.exchange(
            self._executor, self._members, [tensor.contiguous()] * len(self._members)
        )

    def allreduce(self, tensors: Any, opts: Any = None) -> _Done:
        op = getattr(opts, "reduceOp", dist.ReduceOp.SUM) if opts is not None else dist.ReduceOp.SUM
        name = {v: k for k, v in _OPS.items() if k != "avg"}.get(op, "sum")
        for tensor in tensors:
            tensor.copy_(combine(self._exchange(tensor), name))
        return _Done(tensors)

    def allgather(self, output_lists: Any, tensors: Any, opts: Any = None) -> _Done:
        for outputs, tensor in zip(output_lists, tensors):
            for output, part in zip(outputs, self._exchange(tensor)):
                output.copy_(part)
        return _Done(output_lists)

    def broadcast(self, tensors: Any, opts: Any = None) -> _Done:
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        for tensor in tensors:
            tensor.copy_(self._exchange(tensor)[root])
        return _Done(tensors)

    def barrier(self, opts: Any = None) -> _Done:
        self._exchange(torch.zeros(1))
        return _Done([])


class _Done:
    """The work of a `MessageGroup` call: already done when returned."""

    def __init__(self, result: Any) -> None:
        self._result = result

    def wait(self, timeout: Any = None) -> bool:
        return True

    def result(self) -> Any:
        return self._result

    def is_completed(self) -> bool:
        return True
