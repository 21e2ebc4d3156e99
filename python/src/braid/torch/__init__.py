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


def _create_backend(store, rank, size, timeout):
    return _torch_backend.create_backend(store, rank, size, timeout)


def _register():
    # Registering twice raises in torch; importing braid.torch twice (or after a reload) must not.
    if BACKEND_NAME in dist.Backend.backend_list or hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "cuda"])


_register()

__all__ = ["BACKEND_NAME"]
