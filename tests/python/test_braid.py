"""braid's Python package and PyTorch backend, across 2, 3 and 4 real processes.

Each test launches one scenario of workers.py on N ranks (see conftest.py); a scenario runs
many checks and every rank reports each one, so a failure names the rank and the check.
"""

import os
import subprocess
import sys

import pytest

from conftest import HERE, SITE, launch, requires_torch


@pytest.mark.parametrize("n", [2, 3, 4])
def test_core_bindings(n):
    launch("core", n, timeout=90).assert_all_ok()


@requires_torch
@pytest.mark.parametrize("n", [2, 3, 4])
def test_torch_collectives_every_dtype(n):
    launch("collectives", n, timeout=240).assert_all_ok()


@requires_torch
@pytest.mark.parametrize("n", [2, 4])
def test_torch_point_to_point(n):
    launch("p2p", n, timeout=120).assert_all_ok()


@requires_torch
@pytest.mark.parametrize("n", [3, 4])
def test_torch_subgroups(n):
    launch("subgroups", n, timeout=120).assert_all_ok()


@requires_torch
@pytest.mark.parametrize("n", [2, 3])
def test_monitored_barrier_and_sparse_all_reduce(n):
    launch("gaps", n, timeout=120).assert_all_ok()


@requires_torch
@pytest.mark.parametrize("order", ["first", "last", "together"])
def test_destroy_process_group_in_any_order_leaves_no_stack_traces(order):
    res = launch("leave", 3, timeout=60, env={"BRAID_TEST_LEAVE": order})
    res.assert_all_ok()
    for r, out in enumerate(res.output):
        for sign in ("Traceback", "Exception raised from", "frame #", "recvValue failed"):
            assert sign not in out, f"rank {r} printed {sign!r}:\n{out[-3000:]}"


@requires_torch
@pytest.mark.parametrize("n", [2, 3])
def test_ddp_matches_gloo_and_hooks_train(n):
    launch("ddp", n, timeout=240).assert_all_ok()


@requires_torch
@pytest.mark.parametrize("n", [2, 3])
def test_killed_rank_makes_survivors_raise_within_timeout(n):
    group_timeout = 10
    res = launch("kill", n, timeout=60, env={"BRAID_TEST_GROUP_TIMEOUT": str(group_timeout)})
    assert res.codes[n - 1] != 0, "the victim should have been killed"
    res.assert_all_ok(expect_ranks=range(n - 1))
    for r in range(n - 1):
        extra = res.results[r]["extra"]
        assert extra["elapsed"] < group_timeout + 5, extra
        print(f"rank {r}: {extra['error_type']} after {extra['elapsed']:.2f} s: {extra['error'][:200]}")


@requires_torch
def test_a_rank_held_in_another_group_is_followed_there():
    res = launch("held", 3, timeout=90)
    res.assert_all_ok()
    for r in range(3):
        extra = res.results[r]["extra"]
        print(f"rank {r}: after {extra['elapsed']:.2f} s: {extra['error'][:600]}")


@requires_torch
def test_live_status_through_torchs_store_from_a_rank_and_from_outside():
    res = launch("status", 3, timeout=180)
    res.assert_all_ok()
    print(res.results[0]["extra"]["report"])


@requires_torch
def test_live_status_waits_longer_in_jobs_whose_processes_check_less_often():
    sys.path.insert(0, SITE)
    from braid.torch import default_status_wait
    assert [default_status_wait(n) for n in (1, 8, 100)] == [1.0, 1.0, 1.0]
    assert default_status_wait(256) == pytest.approx(1.256)
    assert default_status_wait(1000) == default_status_wait(100000) == pytest.approx(2.0)


@requires_torch
def test_the_live_view_goes_on_after_a_rank_that_does_not_host_the_store_leaves():
    res = launch("status_after_leave", 3, timeout=120)
    res.assert_all_ok()
    print(res.results[0]["extra"]["report"])


@requires_torch
def test_a_rank_that_dies_while_joining_fails_the_others_init_within_seconds():
    res = launch("init_kill", 3, timeout=60)
    assert res.codes[1] != 0, "the victim should have been killed"
    res.assert_all_ok(expect_ranks=[0, 2])
    for r in (0, 2):
        extra = res.results[r]["extra"]
        print(f"rank {r}: after {extra['elapsed']:.2f} s: {extra['error'][:300]}")


@requires_torch
def test_a_malformed_setting_on_one_rank_fails_every_ranks_group_at_once():
    res = launch("bad_setting", 3, timeout=60)
    res.assert_all_ok()
    for r in range(3):
        extra = res.results[r]["extra"]
        print(f"rank {r}: after {extra['elapsed']:.2f} s: {extra['error'][:300]}")


@requires_torch
@pytest.mark.parametrize("n", [2, 4])
def test_a_broadcast_root_among_all_reduces_raises_at_that_call_on_every_rank(n):
    res = launch("mismatch", n, timeout=60)
    res.assert_all_ok()
    for r in range(n):
        extra = res.results[r]["extra"]
        print(f"rank {r}: {extra['error_type']} after {extra['elapsed']:.2f} s: {extra['error'][:300]}")


@pytest.mark.parametrize("n", [2, 3])
def test_core_killed_rank_raises_remote_error(n):
    res = launch("core_kill", n, timeout=60, env={"BRAID_TIMEOUT": "10"}, preload=("numpy",))
    assert res.codes[n - 1] != 0
    res.assert_all_ok(expect_ranks=range(n - 1))
    for r in range(n - 1):
        extra = res.results[r]["extra"]
        assert extra["elapsed"] < 15, extra
        print(f"rank {r}: {extra['error_type']} (rank {extra['error_rank']}) after {extra['elapsed']:.2f} s")


@pytest.mark.parametrize("n", [3])
def test_core_agree_shrink_and_revoke_after_a_rank_dies(n):
    res = launch("core_recover", n, timeout=90, env={"BRAID_TIMEOUT": "10"}, preload=("numpy",))
    assert res.codes[n - 1] != 0
    res.assert_all_ok(expect_ranks=range(n - 1))


@requires_torch
def test_ddp_survivors_shrink_and_finish_with_the_failure_free_parameters():
    res = launch("ddp_recover", 4, timeout=150, env={"BRAID_TIMEOUT": "10"})
    assert res.codes[2] != 0
    res.assert_all_ok(expect_ranks=[0, 1, 3])


@requires_torch
def test_torchrun_launches_an_unchanged_script():
    # The user's path: torchrun (torch.distributed.run) starts the ranks and its c10d store
    # does the rendezvous; the script only names the backend.
    env = dict(os.environ)
    if SITE:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                          os.path.join(HERE, "torchrun_script.py")],
                         env=env, capture_output=True, text=True, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    for r in range(3):
        assert f"torchrun ok rank {r} of 3 local_rank {r}" in out, out[-4000:]


def test_console_scripts_run_the_bundled_programs():
    """The package's console scripts (pip puts them in <target>/bin) exec the programs in
    braid/bin: braidrun, braid-info and the perf tools."""
    bindir = os.path.join(SITE, "bin")
    env = dict(os.environ, PYTHONPATH=SITE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("RANK", "WORLD_SIZE", "BRAID_RANK", "BRAID_WORLD_SIZE"):
        env.pop(k, None)
    v = subprocess.run([os.path.join(bindir, "braidrun"), "--version"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert v.returncode == 0 and v.stdout.startswith("braidrun (braid) "), v
    h = subprocess.run([os.path.join(bindir, "braid-info"), "--help"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert h.returncode == 0 and "usage: braid-info" in h.stdout, h
    r = subprocess.run([os.path.join(bindir, "braidrun"), "-np", "2", os.path.join(bindir, "allreduce_perf"),
                        "-b", "8", "-e", "1K", "-f", "8", "-n", "2", "-c", "1"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Out of bounds values : 0 OK" in r.stdout, r.stdout + r.stderr
    # The perf tools load the package's own libbraid (their run path is $ORIGIN/..), not the
    # build tree's they were linked against.
    ldd = subprocess.run(["ldd", os.path.join(SITE, "braid", "bin", "allreduce_perf")], capture_output=True,
                         text=True, timeout=60)
    lib = [line for line in ldd.stdout.splitlines() if "libbraid.so" in line]
    want = os.path.realpath(os.path.join(SITE, "braid", "libbraid.so.0"))
    assert lib and os.path.realpath(lib[0].split("=>")[1].split("(")[0].strip()) == want, ldd.stdout

