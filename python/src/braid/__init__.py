"""braid: collective communication for distributed training.

    import numpy as np, braid
    comm = braid.Communicator.from_env()          # braidrun / torchrun / OpenMPI / Slurm env
    x = np.ones(1 << 20, dtype=np.float32)
    comm.allreduce(x)                             # in place, SUM
    w = comm.allreduce_async(x, op=braid.ReduceOp.MAX)
    w.wait()                                      # raises braid.RemoteError if a peer died

After a failure the survivors go on without the dead rank (braid.h, "recovery"):

    flag, failed = comm.agree(ok)                 # the same answer on every survivor
    comm = comm.shrink(failed)                    # contiguous ranks, same order

``import braid.torch`` registers the PyTorch backend "braid" with torch.distributed.
"""

from ._errors import Error, RemoteError, RevokedError, TimeoutError  # noqa: A004
from ._core import Communicator, ReduceOp, Work, version

__version__ = version()
__all__ = ["Communicator", "ReduceOp", "Work", "Error", "RemoteError", "RevokedError", "TimeoutError", "version"]
