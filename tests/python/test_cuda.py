"""CUDA tensors through the braid torch backend (label `gpu`): run by the python_gpu CTest
test, which reports SKIPPED where torch sees no GPU. Several ranks may share one GPU."""

import pytest

from conftest import launch


def _gpus():
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


pytestmark = pytest.mark.skipif(_gpus() == 0, reason="no GPU visible to torch")


@pytest.mark.parametrize("n", [2, 3])
def test_cuda_tensors_every_collective_stream_order_and_ddp(n):
    launch("cuda", n, timeout=300).assert_all_ok()


def test_cuda_tensors_on_the_direct_path():
    # The same scenario with the collectives run on the device buffers by kernels; its CUDA
    # graph's replays are staged (docs/cuda.md, "Graph capture").
    launch("cuda", 2, timeout=300, env={"BRAID_CUDA_PATH": "direct"}).assert_all_ok()


def test_cuda_killed_rank_makes_survivors_raise_and_releases_streams():
    n, group_timeout = 3, 10
    res = launch("kill", n, timeout=90, env={"BRAID_TEST_GROUP_TIMEOUT": str(group_timeout), "BRAID_TEST_DEVICE": "cuda"})
    assert res.codes[n - 1] != 0, "the victim should have been killed"
    res.assert_all_ok(expect_ranks=range(n - 1))
