"""braid as torchft's reconfigurable process group.

torchft (PyPI) keeps training going when a replica group dies: its lighthouse forms a new
quorum of the replica groups that are alive, and every step's gradients are averaged across
that quorum through a process group that torchft reconfigures (``configure``) whenever the
quorum changes. ``ProcessGroupBraid`` is that process group on braid, as torchft's own
``ProcessGroupGloo`` is on Gloo::

    from torchft import Manager, DistributedDataParallel
    from braid.torchft import ProcessGroupBraid

    manager = Manager(pg=ProcessGroupBraid(timeout=timedelta(seconds=10)), ...)
    model = DistributedDataParallel(manager, model)

A replica group that dies makes the survivors' braid calls fail within braid's bound (a
killed process at once, a stalled one at the timeout) instead of hanging, torchft drops that
step (``should_commit`` says no), and the next quorum gets a fresh braid communicator on the
store prefix torchft hands out; the old one is aborted, which never blocks.

A quorum can still name a replica that has just died (the lighthouse notices a lost
heartbeat only after its timeout). The new communicator then cannot form: braid's init
fails at its timeout naming the missing rank. ``configure`` keeps that error and returns,
and every call on the group fails with it, the way a lazily created NCCL communicator fails
its first collective: torchft then drops the step and asks for a new quorum. (Raised from
``configure`` instead, the error would leave torchft 0.2's DistributedDataParallel hook a
plain future it cannot handle.)

Needs torchft; importing this module without it raises ImportError saying so.
"""

from datetime import timedelta

import torch
import torch.distributed as dist

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("braid.torchft needs torchft (pip install torchft)") from e

from torch.distributed import ProcessGroup as BaseProcessGroup

import braid.torch as _braid_torch


class ProcessGroupBraid(ProcessGroupWrapper):
    """A torchft process group whose collectives run on braid (CPU tensors, and CUDA tensors
    where braid's device path is available). ``timeout`` bounds every call and the store
    rendezvous of each reconfiguration."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)

    def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int, *args, **kwargs) -> None:
        self._init_error = None
        try:
            super().configure(store_addr, replica_id, rank, world_size, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any failure to form the group is reported by its calls
            self._pg = None
            self._init_error = e
            self._failed_size = world_size

    @property
    def parent(self):
        if getattr(self, "_init_error", None) is not None:
            return _FailedGroup(self._init_error, self._failed_size)
        return super().parent

    def _create_pg(self, store, rank: int, world_size: int) -> BaseProcessGroup:
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        backend = _braid_torch._torch_backend.create_backend(store, rank, world_size, self._timeout)
        pg._register_backend(torch.device("cpu"), BaseProcessGroup.BackendType.CUSTOM, backend)
        if torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), BaseProcessGroup.BackendType.CUSTOM, backend)
        return pg

    def getBackendName(self) -> str:
        return "torchft-braid"

    def _wrap_work(self, work, opts):
        return _ErrorInFutureWork(work)


class _ErrorInFutureWork(dist._Work):
    """A braid Work whose failure is reported through its future alone: ``wait()`` returns
    once the call is over, failed or not. torchft's manager learns of errors from the future
    (it drops the step and reconfigures); an exception out of ``wait()`` would instead escape
    its DistributedDataParallel hook before the future chain exists."""

    def __init__(self, work) -> None:
        super().__init__()
        self._work = work

    def wait(self, timeout=None) -> bool:
        try:
            self._work.wait()
        except Exception:  # noqa: BLE001 - the future holds the same error
            pass
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self):
        return self._work.get_future()


class _FailedGroup:
    """What a group that could not be formed answers: every collective returns a Work whose
    future holds the error that stopped it."""

    def __init__(self, error: Exception, size: int) -> None:
        self._error, self._size = error, size

    def size(self) -> int:
        return self._size

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            fut = torch.futures.Future()
            fut.set_exception(RuntimeError(f"braid: this quorum's group could not be formed: {self._error}"))
            return torch._C._distributed_c10d._create_work_from_future(fut)

        return fail


__all__ = ["ProcessGroupBraid"]
