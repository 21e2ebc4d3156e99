"""braid as a torch.distributed backend.

    import torch.distributed as dist
    import braid.torch                      # registers backend "braid" for CPU and CUDA tensors
    dist.init_process_group("braid")        # torchrun env, or init_method/store as usual

The backend rendezvouses through the c10d Store that init_process_group (or new_group)
passes it, so it needs no port or environment of its own, and the group's ``timeout``
becomes braid's per-operation timeout. The C++ side is csrc/torch/backend.cc.

CUDA tensors go through braid's device path on the tensor's current stream, as
ProcessGroupNCCL's: a call returns at once, ``Work.wait()`` (and the future's ``wait()``)
make the current stream wait for it, and later work on that stream sees its result. One
process group serves both kinds of tensor (one call takes tensors of one device). Where
braid cannot use the GPU (a build without the CUDA toolkit, no driver), a CUDA tensor fails
its call with the reason.

Recovery: ``torch.distributed.shrink_group(failed)`` works on braid groups (the survivors
go on without the failed ranks, no new rendezvous), ``pg.abort()`` fails a group's work,
and ``braid.torch.agree`` / ``braid.torch.revoke`` give braid's agreement and revocation.

Where every rank is: ``braid.torch.live_status()`` from any rank, or from outside the job
``python -m braid.torch.status MASTER_ADDR:MASTER_PORT`` (braid-info --status's report,
asked through torch's own store).
"""

import torch  # noqa: F401  (loads libtorch before the extension that links it)
import torch.distributed as dist

try:
    from .. import _torch_backend
except ImportError as e:  # pragma: no cover - depends on how the package was built
    raise ImportError(
        "braid was built without its PyTorch backend (torch was not importable at build time). "
        "Rebuild it in an environment that has torch: pip install --no-build-isolation ./python"
    ) from e

BACKEND_NAME = "braid"


def _backend(group):
    pg = group if group is not None else dist.group.WORLD
    return pg._get_backend(torch.device("cpu"))


def revoke(group=None):
    """Fails every rank's pending and later calls on ``group`` (default: the world) with
    braid's "revoked" error, which reaches every rank of the group within moments. The group
    can still agree and be shrunk (``braidCommRevoke``)."""
    _torch_backend.revoke(_backend(group))


def agree(flag=1, group=None):
    """Returns ``(flag, failed)``: the bitwise AND of ``flag`` over the ranks of ``group``
    that are alive, and the sorted ranks found failed, the same on every survivor even when
    ranks die meanwhile (ULFM's ``MPIX_Comm_agree``, ``braidCommAgree``). Works on a group
    whose calls fail. Pass ``failed`` to ``torch.distributed.shrink_group`` to go on without
    them::

        try:
            loss.backward()                      # DDP's allreduce fails: a rank died
            ok = 1
        except RuntimeError:
            ok = 0
        ok, failed = braid.torch.agree(ok)
        if failed:
            dist.shrink_group(failed)            # the new default group
    """
    out, failed = _torch_backend.agree(_backend(group), int(flag))
    return out, list(failed)



def live_status(store=None, wait=None):
    """Where every process of the job is, as the text braid-info --status prints: per group's
    communicator (``braid`` for the world, ``braid.pg<name>`` for the others) one line per
    rank with its operation and whom it waits for (or "no answer" from a stopped or lost
    one), then which rank holds the others up. Asks through ``store`` (default: the default
    group's) and waits ``wait`` seconds for the answers: by default 1, or, where the job is
    large enough that its processes check for the question less often (every millisecond
    per process over 100, at most once a second), that interval and a second more. The view
    ends once the process hosting torch's store has left the job."""
    if store is None:
        store = dist.distributed_c10d._get_default_store()
    if wait is None:
        wait = default_status_wait(dist.get_world_size() if dist.is_initialized() else 1)
    return _torch_backend.live_status(store, float(wait))


def default_status_wait(processes):
    """Seconds to wait for the live view's answers from a job of ``processes`` processes:
    their threads on torch's store check for a question every max(100, processes)
    milliseconds, at most every second (core::callerPollInterval in libbraid); a second more
    covers the answers' own round trips."""
    return 1.0 if processes <= 100 else min(processes, 1000) / 1000.0 + 1.0


def _key_prefix(group_id):
    """The name of a group's communicator: "braid" for the world (torch's group "0"), else
    "braid.pg<group name>", so that errors and braid's live view tell the groups apart."""
    name = str(group_id) if group_id is not None else ""
    if name in ("", "0"):
        return "braid"
    return "braid.pg" + "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _create_backend(dist_backend_opts, backend_options=None):
    o = dist_backend_opts
    return _torch_backend.create_backend(o.store, o.group_rank, o.group_size, o.timeout,
                                         _key_prefix(getattr(o, "group_id", "")))


def _register():
    # Registering twice raises in torch; importing braid.torch twice (or after a reload) must not.
    if BACKEND_NAME in dist.Backend.backend_list or hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])


_register()

__all__ = ["BACKEND_NAME", "agree", "live_status", "revoke"]
