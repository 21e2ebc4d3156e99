"""The per-rank side of braid's Python tests: `python workers.py SCENARIO` in every rank's
process (launched by conftest.launch with a torchrun-style environment).

Each scenario runs a list of checks in the same order on every rank and records, per check,
None (passed) or the error text; the result goes to $BRAID_TEST_OUT/rank<R>.json. Expected
values are computed independently on each rank from the formula that generated the inputs,
never from another collective.
"""

import datetime
import json
import os
import sys
import time
import traceback

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
OUT = os.environ["BRAID_TEST_OUT"]

checks = {}
extra = {}


def check(name):
    """Decorator-free check runner: `with check("x"): ...` records pass/fail under `name`."""

    class _Ctx:
        def __enter__(self):
            return self

        def __exit__(self, typ, val, tb):
            if typ is None:
                checks[name] = None
            else:
                checks[name] = "".join(traceback.format_exception_only(typ, val)).strip()[-2000:]
            return True  # keep going: every rank must still issue the same collectives

    return _Ctx()


def timed_failure(fn, keep=1000):
    """Runs fn(); records how long it took and its error (or None) in `extra` ("elapsed",
    "error", the text cut to `keep` characters) and returns the error."""
    start = time.monotonic()
    err = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        err = e
    extra["elapsed"] = time.monotonic() - start
    extra["error"] = str(err)[:keep] if err else None
    return err


def write_result():
    with open(os.path.join(OUT, f"rank{RANK}.json.tmp"), "w") as f:
        json.dump({"checks": checks, "extra": extra}, f)
    os.replace(os.path.join(OUT, f"rank{RANK}.json.tmp"), os.path.join(OUT, f"rank{RANK}.json"))


# ------------------------------------------------------------------------------------------
# torch.distributed scenarios
# ------------------------------------------------------------------------------------------

def init_torch(timeout_s=60, backend="braid"):
    import torch
    import torch.distributed as dist
    import braid.torch  # noqa: F401  registers "braid"

    torch.set_num_threads(1)
    env_timeout = os.environ.get("BRAID_TIMEOUT")
    dist.init_process_group(backend, rank=RANK, world_size=WORLD, timeout=datetime.timedelta(seconds=timeout_s))
    with check("init_process_group leaves BRAID_TIMEOUT alone (its timeout goes to the communicator)"):
        assert os.environ.get("BRAID_TIMEOUT") == env_timeout, os.environ.get("BRAID_TIMEOUT")
    return torch, dist


FLOAT_TYPES = ["float32", "float64", "float16", "bfloat16"]
INT_TYPES = ["int8", "int16", "int32", "int64", "uint8"]
# Types torch itself computes little on (no CPU arithmetic for fp8, little for uint16): the
# checks convert to float64 to compare.
NARROW_TYPES = ["uint16", "float8_e4m3fn", "float8_e5m2"]


def scenario_collectives():
    torch, dist = init_torch()
    R, N = RANK, WORLD
    dt = lambda name: getattr(torch, name)  # noqa: E731

    def small(n, dtype, r=R):
        # Reduction inputs: small integers, so every sum/product/min/max is exact in every
        # dtype, fp16 and int8 included (a product over 4 ranks stays <= 81).
        return ((torch.arange(n) % 2) + (r % 2) + 1).to(dtype)

    def base(n, dtype, r=R):
        # Data-movement inputs: distinct per rank and per element, exact in every dtype.
        return ((torch.arange(n) % 7) + 10 * r + 1).to(dtype)

    def tol(name):
        return {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-6}.get(name, 1e-12)

    with check("the braid backend is registered for cpu and cuda, one backend for both"):
        assert dist.Backend.backend_capability.get("braid") == ["cpu", "cuda"], dist.Backend.backend_capability
        pg = dist.group.WORLD
        assert pg._get_backend(torch.device("cuda")) is pg._get_backend(torch.device("cpu"))

    # all_reduce: every dtype x op, against the reduction computed locally from the formula.
    for name in FLOAT_TYPES + INT_TYPES:
        dtype = dt(name)
        per = [small(17, torch.float64, r) for r in range(N)]
        expect = {
            "SUM": sum(per), "PRODUCT": torch.stack(per).prod(0), "MIN": torch.stack(per).min(0).values,
            "MAX": torch.stack(per).max(0).values,
        }
        if name in FLOAT_TYPES:
            expect["AVG"] = sum(per) / N
        for op, want in expect.items():
            with check(f"all_reduce {name} {op}"):
                t = small(17, dtype)
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                assert t.dtype == dtype
                torch.testing.assert_close(t.double(), want, rtol=tol(name), atol=0)

    for name in INT_TYPES + ["bool"]:
        dtype = dt(name)
        vals = [((torch.arange(32) * 7 + r * 5) % 11).to(torch.int64) for r in range(N)]
        if name == "bool":
            vals = [(v % 2 == 0) for v in vals]
        for op in ("BAND", "BOR", "BXOR"):
            with check(f"all_reduce {name} {op}"):
                t = vals[R].to(dtype).clone()  # .to() of the same dtype would alias vals[R]
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                acc = vals[0].to(dtype).clone()
                for v in vals[1:]:
                    v = v.to(dtype)
                    acc = acc & v if op == "BAND" else acc | v if op == "BOR" else acc ^ v
                assert torch.equal(t, acc), (t, acc)
    for op, fn in (("SUM", "any"), ("PRODUCT", "all"), ("MAX", "any"), ("MIN", "all")):
        with check(f"all_reduce bool {op}"):
            vals = [torch.tensor([r % 2 == 0, False, True, r == N - 1]) for r in range(N)]
            t = vals[R].clone()
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            want = getattr(torch.stack(vals), fn)(0)
            assert torch.equal(t, want), (t, want)

    # Inputs 1..3 on at most 4 ranks: every partial sum is exact in fp8 (E5M2 included).
    for name in NARROW_TYPES:
        dtype = dt(name)
        per = [small(17, torch.float64, r) for r in range(N)]
        for op, want in (("SUM", sum(per)), ("MAX", torch.stack(per).max(0).values),
                         ("MIN", torch.stack(per).min(0).values)):
            with check(f"all_reduce {name} {op}"):
                t = small(17, torch.float64).to(dtype)
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                assert t.dtype == dtype
                assert torch.equal(t.double(), want), (t.double(), want)
        with check(f"broadcast and all_gather_into_tensor {name}"):
            t = (base(9, torch.float64, 0) % 16).to(dtype) if R == 0 else torch.zeros(9, dtype=dtype)
            dist.broadcast(t, 0)
            assert torch.equal(t.double(), base(9, torch.float64, 0) % 16)
            out = torch.empty(N * 5, dtype=dtype)
            dist.all_gather_into_tensor(out, small(5, torch.float64).to(dtype))
            assert torch.equal(out.double(), torch.cat([small(5, torch.float64, r) for r in range(N)]))

    for name in ("float32", "float64", "bfloat16"):
        with check(f"all_reduce {name} PREMUL_SUM"):
            t = small(9, dt(name))
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
            want = sum(small(9, torch.float64, r) for r in range(N)) * 0.5
            torch.testing.assert_close(t.double(), want, rtol=1e-2, atol=0)

    with check("all_reduce in place on a non-contiguous view"):
        m = torch.arange(12, dtype=torch.float32).reshape(3, 4) + R
        v = m.t()  # a strided view: braid works on a contiguous copy and writes it back
        assert not v.is_contiguous()
        dist.all_reduce(v)
        want = sum(torch.arange(12, dtype=torch.float32).reshape(3, 4) + r for r in range(N))
        assert torch.equal(m, want)

    with check("all_reduce large (multi-slot) float32"):
        t = torch.full((3 << 20,), float(R + 1))
        dist.all_reduce(t)
        assert torch.all(t == N * (N + 1) / 2)

    with check("all_reduce empty tensor"):
        t = torch.zeros(0)
        dist.all_reduce(t)

    for name in FLOAT_TYPES + INT_TYPES:
        for root in range(N):
            with check(f"broadcast {name} root {root}"):
                t = base(33, dt(name)) if R == root else torch.zeros(33, dtype=dt(name))
                dist.broadcast(t, root)
                assert torch.equal(t, base(33, dt(name), root))

    for name in ("float32", "int64", "bfloat16"):
        root = 1 % N
        with check(f"reduce {name} to {root}"):
            t = small(10, dt(name))
            dist.reduce(t, root, op=dist.ReduceOp.SUM)
            want = sum(small(10, torch.float64, r) for r in range(N)) if R == root else small(10, torch.float64)
            torch.testing.assert_close(t.double(), want)

    for name in FLOAT_TYPES + INT_TYPES:
        with check(f"all_gather {name}"):
            outs = [torch.empty(7, dtype=dt(name)) for _ in range(N)]
            dist.all_gather(outs, base(7, dt(name)))
            for r in range(N):
                assert torch.equal(outs[r], base(7, dt(name), r))
        with check(f"all_gather_into_tensor {name}"):
            out = torch.empty(N * 6, dtype=dt(name))
            dist.all_gather_into_tensor(out, base(6, dt(name)))
            assert torch.equal(out, torch.cat([base(6, dt(name), r) for r in range(N)]))
        with check(f"reduce_scatter_tensor {name}"):
            inp = torch.cat([small(5, dt(name)) * (i + 1) for i in range(N)])
            out = torch.empty(5, dtype=dt(name))
            dist.reduce_scatter_tensor(out, inp)
            want = sum(small(5, torch.float64, r) for r in range(N)) * (R + 1)
            torch.testing.assert_close(out.double(), want, rtol=tol(name), atol=0)
        with check(f"reduce_scatter {name}"):
            ins = [small(4, dt(name)) + i for i in range(N)]
            out = torch.empty(4, dtype=dt(name))
            dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)
            want = torch.stack([small(4, torch.float64, r) + R for r in range(N)]).max(0).values
            torch.testing.assert_close(out.double(), want)

    with check("all_gather -0.0 and NaN bit-exact"):
        x = torch.tensor([-0.0, float("nan"), R + 0.5])
        outs = [torch.empty(3) for _ in range(N)]
        dist.all_gather(outs, x)
        for r in range(N):
            assert torch.signbit(outs[r][0]) and torch.isnan(outs[r][1]) and outs[r][2] == r + 0.5

    # all_to_all_single: equal splits, then uneven splits (rank r sends s+1 rows to rank s...).
    for name in ("float32", "int32", "float16"):
        with check(f"all_to_all_single {name} equal"):
            inp = (torch.arange(N * 3) + 100 * R).to(dt(name))
            out = torch.empty(N * 3, dtype=dt(name))
            dist.all_to_all_single(out, inp)
            want = torch.cat([(torch.arange(R * 3, R * 3 + 3) + 100 * s) for s in range(N)]).to(dt(name))
            assert torch.equal(out, want), (out, want)
    with check("all_to_all_single uneven splits 2-D"):
        send_splits = [(R + d) % 3 + (1 if d == 0 else 0) for d in range(N)]   # rows to each dst
        recv_splits = [(s + R) % 3 + (1 if R == 0 else 0) for s in range(N)]  # rows from each src
        inp = torch.cat([torch.full((send_splits[d], 2), float(R * 10 + d)) for d in range(N)])
        out = torch.empty(sum(recv_splits), 2)
        dist.all_to_all_single(out, inp, output_split_sizes=recv_splits, input_split_sizes=send_splits)
        want = torch.cat([torch.full((recv_splits[s], 2), float(s * 10 + R)) for s in range(N)])
        assert torch.equal(out, want), (out, want)
    with check("all_to_all list"):
        ins = [torch.full((d + 1,), float(R * 10 + d)) for d in range(N)]
        outs = [torch.empty(R + 1) for _ in range(N)]
        dist.all_to_all(outs, ins)
        for s in range(N):
            assert torch.equal(outs[s], torch.full((R + 1,), float(s * 10 + R)))

    with check("all_gather uneven sizes (allgatherv)"):
        outs = [torch.empty(r + 1, dtype=torch.int64) for r in range(N)]
        dist.all_gather(outs, torch.arange(R + 1) + 100 * R)
        for r in range(N):
            assert torch.equal(outs[r], torch.arange(r + 1) + 100 * r), (r, outs[r])
    with check("reduce_scatter uneven sizes (reduceScatterv)"):
        ins = [torch.full((i + 2,), float(R + i)) for i in range(N)]
        out = torch.empty(R + 2)
        dist.reduce_scatter(out, ins)
        assert torch.equal(out, torch.full((R + 2,), float(sum(range(N)) + N * R)))
    with check("reduce and reduce_scatter_tensor with PREMUL_SUM, bool and bitwise ops"):
        t = small(6, torch.float32)
        dist.reduce(t, 0, op=dist._make_nccl_premul_sum(0.25))
        if R == 0:
            torch.testing.assert_close(t.double(), sum(small(6, torch.float64, r) for r in range(N)) * 0.25)
        inp = torch.cat([small(3, torch.float64) * (i + 1) for i in range(N)])
        out = torch.empty(3, dtype=torch.float64)
        dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(2.0))
        torch.testing.assert_close(out, sum(small(3, torch.float64, r) for r in range(N)) * (R + 1) * 2.0)
        b = torch.tensor([R == 0, True, False, R % 2 == 1]).repeat(N)
        bo = torch.empty(4, dtype=torch.bool)
        dist.reduce_scatter_tensor(bo, b, op=dist.ReduceOp.SUM)  # logical or
        assert torch.equal(bo, torch.tensor([True, True, False, N > 1])), bo
        x = torch.tensor([1 << R, 3, 0xF0 | R], dtype=torch.int32)
        dist.reduce(x, N - 1, op=dist.ReduceOp.BOR)
        if R == N - 1:
            want = torch.tensor([(1 << N) - 1, 3, 0xF0 | (0 if N == 1 else (N - 1) | (N - 2))], dtype=torch.int32)
            acc = 0
            for r in range(N):
                acc |= 0xF0 | r
            want[2] = acc
            assert torch.equal(x, want), (x, want)
    with check("all_to_all_single: zero-size blocks"):
        send_splits = [1 if d == (R + 1) % N else 0 for d in range(N)]
        recv_splits = [1 if s == (R - 1) % N else 0 for s in range(N)]
        out = torch.empty(1)
        dist.all_to_all_single(out, torch.tensor([float(R)]), output_split_sizes=recv_splits,
                               input_split_sizes=send_splits)
        assert out.item() == (R - 1) % N

    root = N - 1
    with check("gather"):
        outs = [torch.empty(4, dtype=torch.int64) for _ in range(N)] if R == root else None
        dist.gather(base(4, torch.int64), outs, dst=root)
        if R == root:
            for r in range(N):
                assert torch.equal(outs[r], base(4, torch.int64, r))
    with check("scatter"):
        ins = [base(6, torch.float32, r) * 2 for r in range(N)] if R == 0 else None
        out = torch.empty(6)
        dist.scatter(out, ins, src=0)
        assert torch.equal(out, base(6, torch.float32, R) * 2)
    with check("gather_object / broadcast_object_list"):
        objs = [None] * N
        dist.all_gather_object(objs, {"rank": R})
        assert [o["rank"] for o in objs] == list(range(N))
        lst = [f"hello from {R}"]
        dist.broadcast_object_list(lst, src=0)
        assert lst == ["hello from 0"]

    with check("barrier"):
        dist.barrier()

    # Coalesced forms (what FSDP and the coalescing manager use).
    with check("coalescing manager all_reduce"):
        from torch.distributed.distributed_c10d import _coalescing_manager
        ts = [torch.full((3,), float(R)), torch.full((2,), float(2 * R))]
        with _coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        s = sum(range(N))
        assert torch.equal(ts[0], torch.full((3,), float(s))) and torch.equal(ts[1], torch.full((2,), 2.0 * s))
    with check("coalescing manager all_gather_into_tensor / reduce_scatter_tensor"):
        from torch.distributed.distributed_c10d import _coalescing_manager
        outs = [torch.empty(2 * N), torch.empty(3 * N)]
        with _coalescing_manager(async_ops=True) as cm:
            dist.all_gather_into_tensor(outs[0], torch.full((2,), float(R)))
            dist.all_gather_into_tensor(outs[1], torch.full((3,), float(R + 1)))
        cm.wait()
        assert torch.equal(outs[0], torch.arange(N).float().repeat_interleave(2))
        assert torch.equal(outs[1], (torch.arange(N) + 1).float().repeat_interleave(3))
        rs = [torch.empty(2), torch.empty(1)]
        with _coalescing_manager(async_ops=True) as cm:
            dist.reduce_scatter_tensor(rs[0], torch.arange(2 * N).float())
            dist.reduce_scatter_tensor(rs[1], torch.ones(N))
        cm.wait()
        assert torch.equal(rs[0], torch.arange(2 * R, 2 * R + 2).float() * N) and rs[1].item() == N
    with check("all_reduce_coalesced"):
        ts = [torch.full((3,), float(R)), torch.full((2, 2), 1.0).t(), torch.full((4,), 1.0)]
        dist.all_reduce_coalesced(ts, op=dist.ReduceOp.SUM)
        s = sum(range(N))
        assert torch.equal(ts[0], torch.full((3,), float(s))) and torch.equal(ts[1], torch.full((2, 2), float(N)))
        assert torch.equal(ts[2], torch.full((4,), float(N)))

    # Asynchronous operations and futures.
    with check("async work, is_completed, future value"):
        t = torch.full((1000,), float(R))
        w = dist.all_reduce(t, async_op=True)
        fut = w.get_future()
        chained = fut.then(lambda f: f.value()[0] * 2)
        w.wait()
        assert w.is_completed(), "is_completed after wait"
        assert w.exception() is None, w.exception()
        fut.wait()
        assert fut.done(), "future not done after wait"
        assert isinstance(fut.value(), list) and fut.value()[0] is not None, fut.value()
        assert torch.equal(fut.value()[0], t)
        assert torch.equal(chained.wait(), t * 2)
        assert torch.all(t == sum(range(N)))
    with check("many async ops complete in order"):
        ts = [torch.full((100 + i,), float(R + i)) for i in range(20)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in works:
            w.wait()
        for i, t in enumerate(ts):
            assert torch.all(t == sum(r + i for r in range(N)))
    with check("nested collective from a future callback (PowerSGD pattern)"):
        t = torch.ones(4)
        w = dist.all_reduce(t, async_op=True)

        def cb(f):
            u = f.value()[0] + 1
            return dist.all_reduce(u, async_op=True).get_future().wait()[0]

        got = w.get_future().then(cb).wait()
        assert torch.equal(got, torch.full((4,), float(N * (N + 1))))

    # Bad arguments are rejected on the caller's thread, before anything is sent.
    with check("unsupported dtype raises ValueError"):
        try:
            # (complex tensors would pass: torch all-reduces them as real views)
            dist.all_reduce(torch.zeros(3, dtype=torch.float8_e4m3fnuz))
            raise AssertionError("float8_e4m3fnuz accepted")
        except ValueError as e:
            assert "dtype" in str(e)
    with check("bitwise op on float raises ValueError"):
        try:
            dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
            raise AssertionError("BAND on float accepted")
        except ValueError:
            pass
    with check("wrong output size raises ValueError"):
        try:
            dist.all_gather_into_tensor(torch.empty(N * 3 + 1), torch.ones(3))
            raise AssertionError("bad size accepted")
        except ValueError:
            pass
    with check("collectives still work after rejected calls"):
        t = torch.ones(2)
        dist.all_reduce(t)
        assert torch.all(t == N)

    dist.destroy_process_group()


def scenario_p2p():
    torch, dist = init_torch()
    R, N = RANK, WORLD
    with check("send/recv ring (blocking, even/odd order)"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        out = torch.full((5,), float(R))
        got = torch.empty(5)
        if R % 2 == 0:
            dist.send(out, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(out, nxt)
        assert torch.equal(got, torch.full((5,), float(prv)))
    with check("isend/irecv both directions at once"):
        works, bufs = [], {}
        for p in range(N):
            if p == R:
                continue
            bufs[p] = torch.empty(1000, dtype=torch.int64)
            works.append(dist.isend(torch.full((1000,), R * 100 + p, dtype=torch.int64), p))
            works.append(dist.irecv(bufs[p], p))
        for w in works:
            w.wait()
        for p, b in bufs.items():
            assert torch.all(b == p * 100 + R)
    with check("batch_isend_irecv ring"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        got = torch.empty(3, dtype=torch.bfloat16)
        ops = [dist.P2POp(dist.isend, torch.full((3,), float(R), dtype=torch.bfloat16), nxt),
               dist.P2POp(dist.irecv, got, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert torch.equal(got, torch.full((3,), float(prv), dtype=torch.bfloat16))
    with check("several messages to one peer stay in order"):
        if R == 0:
            for i in range(5):
                dist.send(torch.full((2,), float(i)), 1)
        elif R == 1:
            for i in range(5):
                g = torch.empty(2)
                dist.recv(g, 0)
                assert torch.equal(g, torch.full((2,), float(i)))
    with check("collectives interleave with p2p"):
        t = torch.ones(3)
        dist.all_reduce(t)
        assert torch.all(t == N)
    # Large messages (far beyond what the transport buffers, so a send completes only once
    # its receiver runs): the cases that deadlock unless the backend batches p2p calls.
    big = 2 << 20  # float32 elements: 8 MB
    with check("isend then irecv on every rank at once, 8 MB ring (cross-send)"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        out = torch.arange(big, dtype=torch.float32) + R
        got = torch.empty(big)
        ws = dist.isend(out, nxt)
        wr = dist.irecv(got, prv)
        ws.wait()
        wr.wait()
        assert torch.equal(got, torch.arange(big, dtype=torch.float32) + prv)
    with check("isend/irecv with every peer, 4 MB each, waited in reverse"):
        works, bufs = [], {}
        for p in range(N):
            if p == R:
                continue
            bufs[p] = torch.empty(big // 2, dtype=torch.int32)
            works.append(dist.isend(torch.full((big // 2,), R * 100 + p, dtype=torch.int32), p))
            works.append(dist.irecv(bufs[p], p))
        for w in reversed(works):
            w.wait()
        for p, b in bufs.items():
            assert torch.all(b == p * 100 + R)
    with check("batch_isend_irecv, two large messages each way with one peer"):
        if N % 2 == 0:
            peer = R ^ 1
            outs = [torch.full((big // 2,), float(R * 10 + i)) for i in range(2)]
            gots = [torch.empty(big // 2) for _ in range(2)]
            ops = [dist.P2POp(dist.isend, o, peer) for o in outs] + [dist.P2POp(dist.irecv, g, peer) for g in gots]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            for i in range(2):
                assert torch.all(gots[i] == peer * 10 + i), (i, gots[i][:4])
    with check("two isends to one peer, taken by two blocking recvs there, 512 KiB each"):
        # The sends go out as one group; the receives are calls of their own: each must get
        # its own message whole (the pair's messages match in issue order).
        if N % 2 == 0:
            peer = R ^ 1
            n = 1 << 17
            if R % 2 == 0:
                works = [dist.isend(torch.arange(n, dtype=torch.float32) + i * n, peer) for i in range(2)]
                for w in works:
                    w.wait()
            else:
                for i in range(2):
                    g = torch.empty(n)
                    dist.recv(g, peer)
                    assert torch.equal(g, torch.arange(n, dtype=torch.float32) + i * n), (i, g[:4])
    with check("irecv into a non-contiguous tensor, is_completed polling"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        m = torch.zeros(64, 32)
        view = m.t()[:, :10]  # strided
        ws = dist.isend(torch.arange(320, dtype=torch.float32).reshape(32, 10) + R, nxt)
        wr = dist.irecv(view, prv)
        deadline = time.monotonic() + 30
        while not (ws.is_completed() and wr.is_completed()):
            assert time.monotonic() < deadline, "p2p never completed without wait()"
            time.sleep(0.001)
        assert torch.equal(view, torch.arange(320, dtype=torch.float32).reshape(32, 10) + prv)
    with check("isend, then a collective, then wait (issue order kept)"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        got = torch.empty(4)
        wr = dist.irecv(got, prv)
        ws = dist.isend(torch.full((4,), float(R)), nxt)
        t = torch.full((3,), float(R))
        dist.all_reduce(t)
        wr.wait()
        ws.wait()
        assert torch.all(t == sum(range(N))) and torch.all(got == prv)
    with check("isend future completes with the tensor"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        got = torch.empty(5)
        fs = dist.isend(torch.ones(5) * R, nxt).get_future()
        fr = dist.irecv(got, prv).get_future()
        fr.wait()
        fs.wait()
        assert torch.equal(fr.value()[0], torch.ones(5) * prv)
    dist.destroy_process_group()


def scenario_subgroups():
    torch, dist = init_torch()
    R, N = RANK, WORLD
    evens = [r for r in range(N) if r % 2 == 0]
    odds = [r for r in range(N) if r % 2 == 1]
    g_even = dist.new_group(evens, backend="braid")
    g_odd = dist.new_group(odds, backend="braid") if odds else None
    g_rev = dist.new_group(list(reversed(range(N))), backend="braid")
    mine, members = (g_even, evens) if R % 2 == 0 else (g_odd, odds)
    with check("all_reduce in own subgroup"):
        t = torch.full((4,), float(R))
        dist.all_reduce(t, group=mine)
        assert torch.all(t == sum(members))
    with check("broadcast in subgroup from its last member (global rank)"):
        src = members[-1]
        t = torch.full((3,), float(R))
        dist.broadcast(t, src=src, group=mine)
        assert torch.all(t == src)
    with check("all_gather in subgroup"):
        outs = [torch.empty(2) for _ in members]
        dist.all_gather(outs, torch.full((2,), float(R)), group=mine)
        assert [o[0].item() for o in outs] == [float(m) for m in members]
    with check("group with reversed rank order"):
        t = torch.tensor([float(R)])
        dist.broadcast(t, src=N - 1, group=g_rev)
        assert t.item() == N - 1
    with check("world still works next to subgroups"):
        t = torch.ones(2)
        dist.all_reduce(t)
        assert torch.all(t == N)
    with check("async ops on two groups at once"):
        a, b = torch.full((100,), 1.0), torch.full((100,), 2.0)
        w1 = dist.all_reduce(a, group=mine, async_op=True)
        w2 = dist.all_reduce(b, async_op=True)
        w1.wait()
        w2.wait()
        assert torch.all(a == len(members)) and torch.all(b == 2.0 * N)
    with check("destroy a subgroup"):
        dist.destroy_process_group(g_rev)
    dist.destroy_process_group()


def _mlp(torch, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 8))


def _train(torch, ddp, steps, seed, bucket_cap_mb=None):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(seed * 1000 + RANK)  # each rank its own data
    losses = []
    # One fixed batch per rank: the loss then falls steadily, so "it trains" is checkable.
    x = torch.randn(16, 32, generator=gen)
    y = torch.randn(16, 8, generator=gen)
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def scenario_ddp():
    torch, dist = init_torch()
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

    gloo = dist.new_group(backend="gloo")
    steps = 12
    # Small buckets so that the model's gradients travel in several buckets (several
    # overlapping async all-reduces per step).
    with check("DDP braid == DDP gloo (same seed, fp32 tolerance)"):
        m_braid = DDP(_mlp(torch, 0), bucket_cap_mb=0.01)
        m_gloo = DDP(_mlp(torch, 0), process_group=gloo, bucket_cap_mb=0.01)
        lb = _train(torch, m_braid, steps, seed=1)
        lg = _train(torch, m_gloo, steps, seed=1)
        for (n1, p1), (_, p2) in zip(m_braid.named_parameters(), m_gloo.named_parameters()):
            torch.testing.assert_close(p1, p2, rtol=1e-5, atol=1e-6, msg=f"{n1} differs")
        extra["losses"] = lb
        assert lb[-1] < lb[0], lb
    with check("DDP parameters identical on every rank"):
        flat = torch.cat([p.detach().reshape(-1) for p in m_braid.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        assert torch.equal(flat, ref)
    for hook_name, hook in (("fp16_compress_hook", default_hooks.fp16_compress_hook),
                            ("bf16_compress_hook", default_hooks.bf16_compress_hook),
                            ("allreduce_hook", default_hooks.allreduce_hook)):
        with check(f"DDP {hook_name} trains"):
            m = DDP(_mlp(torch, 0), bucket_cap_mb=0.01)
            m.register_comm_hook(None, hook)
            losses = _train(torch, m, steps, seed=2)
            assert all(l == l for l in losses) and losses[-1] < losses[0], losses
            flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
            ref = flat.clone()
            dist.broadcast(ref, 0)
            assert torch.equal(flat, ref), "replicas diverged"
    with check("DDP PowerSGD hook trains"):
        m = DDP(_mlp(torch, 0), bucket_cap_mb=0.01)
        state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=3,
                                       min_compression_rate=0.5)
        m.register_comm_hook(state, powerSGD.powerSGD_hook)
        losses = _train(torch, m, steps, seed=3)
        assert all(l == l for l in losses) and losses[-1] < losses[0], losses
        flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        assert torch.equal(flat, ref), "replicas diverged"
    dist.destroy_process_group()


def scenario_ddp_recover():
    """DDP on the braid backend loses rank 2 of 4 at step 5 of 12. Every step ends with an
    agreement on whether every rank's backward succeeded; the survivors agree on who failed,
    torch.distributed.shrink_group drops it, DDP is rebuilt on the new default group and the
    step is done again. The global batch is split among the ranks alive, so the survivors
    must end with the parameters of the same training on one process, without failures."""
    torch, dist = init_torch()
    import braid.torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_default_dtype(torch.float64)
    steps, victim, fault_step, batch = 12, 2, 5, 12
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(batch, 32, generator=gen)
    y = torch.randn(batch, 8, generator=gen)

    def fresh():
        return _mlp(torch, 0).double()

    # The reference: the whole batch on this process alone.
    ref = fresh()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()

    model = fresh()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ddp = DDP(model, bucket_cap_mb=0.001)  # several buckets: several allreduces per step
    step, redone, shrinks = 0, 0, []
    while step < steps:
        if RANK == victim and step == fault_step:
            write_result()
            os.kill(os.getpid(), 9)
        size, rank = dist.get_world_size(), dist.get_rank()
        share = batch // size
        rows = slice(rank * share, (rank + 1) * share)
        opt.zero_grad()
        ok = 1
        try:
            torch.nn.functional.mse_loss(ddp(x[rows]), y[rows]).backward()
        except RuntimeError as e:
            ok = 0
            extra["error"] = str(e)[:400]
        flag, failed = braid.torch.agree(ok)
        if flag:
            opt.step()
            step += 1
            continue
        redone += 1
        if failed:
            dist.shrink_group(failed)
            shrinks.append((step, size, dist.get_world_size(), failed))
        ddp = DDP(model, bucket_cap_mb=0.001)
    extra["shrinks"] = shrinks
    with check("the survivors agreed that rank 2 failed, and shrank once at step 5"):
        assert shrinks == [(fault_step, 4, 3, [victim])], shrinks
    with check("the new group renumbers the survivors 0, 1, 2"):
        assert dist.get_world_size() == 3 and dist.get_rank() == [0, 1, None, 2][RANK], dist.get_rank()
    with check("every survivor ends with the parameters of a run without failures"):
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12, msg=f"{name} differs")
    with check("the survivors hold identical parameters"):
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        first = flat.clone()
        dist.broadcast(first, 0)
        assert torch.equal(flat, first)
    with check("braid.torch.revoke fails every survivor's next call"):
        if dist.get_rank() == 1:
            braid.torch.revoke()
        try:
            t = torch.ones(4)
            for _ in range(1000):
                dist.all_reduce(t)
            raise AssertionError("no error after revoke")
        except RuntimeError as e:
            assert "revoked" in str(e), str(e)[:400]
    write_result()
    if RANK == 0:
        time.sleep(2)  # rank 0 serves torch's store: the others finish reading it first
    os._exit(0)


def scenario_cuda():
    """CUDA tensors through the braid backend (needs a GPU; ranks share GPUs round-robin):
    every collective on device tensors, stream order, a CUDA graph's replays, Work.wait() on
    another stream, CPU and CUDA calls interleaved on one group, a mixed call refused, DDP on
    the GPU."""
    torch, dist = init_torch()
    from torch.nn.parallel import DistributedDataParallel as DDP

    R, N = RANK, WORLD
    dev = torch.device("cuda", R % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    extra["device"] = torch.cuda.get_device_name(dev)

    with check("one braid backend serves cpu and cuda"):
        pg = dist.group.WORLD
        assert pg._get_backend(torch.device("cuda")) is pg._get_backend(torch.device("cpu"))
    with check("all_reduce cuda float32/bfloat16/int64 SUM, MAX"):
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for op, want in (("SUM", N * (N + 1) // 2), ("MAX", N)):
                t = torch.full((1 << 20,), R + 1, dtype=dtype, device=dev)
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                assert t.device == dev
                assert torch.all(t == want).item(), (dtype, op, t[:4].tolist())
    with check("stream order: a kernel queued after all_reduce sees its result (side stream, no host sync)"):
        s = torch.cuda.Stream(device=dev)
        with torch.cuda.stream(s):
            t = torch.ones(1 << 22, device=dev) * (R + 1)    # produced on s
            dist.all_reduce(t)                               # enqueued on s, returns at once
            u = t * 2                                        # queued on s after it
        s.synchronize()
        assert torch.all(u == N * (N + 1)).item(), u[:4].tolist()
    with check("all_reduce captured into a CUDA graph (torch.cuda.graph) runs at every replay"):
        t = torch.zeros(1 << 16, device=dev)
        s = torch.cuda.Stream(device=dev)
        s.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            dist.all_reduce(t)
        for i in range(1, 4):
            t.fill_(float(R + i))
            graph.replay()
            torch.cuda.synchronize()
            want = sum(r + i for r in range(N))
            assert torch.all(t == want).item(), (i, t[:4].tolist())
        del graph
    with check("async work.wait() makes the current stream wait"):
        t = torch.full((3 << 20,), float(R), device=dev)
        w = dist.all_reduce(t, async_op=True)
        other = torch.cuda.Stream(device=dev)
        with torch.cuda.stream(other):
            w.wait()
            v = t + 0
        other.synchronize()
        assert torch.all(v == N * (N - 1) / 2).item(), v[:4].tolist()
        fut = w.get_future()
        assert torch.all(fut.wait()[0] == N * (N - 1) / 2).item()
    with check("broadcast, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single on cuda"):
        b = torch.full((1001,), float(R), device=dev)
        dist.broadcast(b, src=N - 1)
        assert torch.all(b == N - 1).item()
        x = torch.arange(5, device=dev, dtype=torch.float32) + 10 * R
        g = torch.empty(5 * N, device=dev)
        dist.all_gather_into_tensor(g, x)
        want = torch.cat([torch.arange(5, device=dev, dtype=torch.float32) + 10 * r for r in range(N)])
        assert torch.equal(g, want), g.tolist()
        rs_in = torch.arange(4 * N, device=dev, dtype=torch.float32) * (R + 1)
        rs_out = torch.empty(4, device=dev)
        dist.reduce_scatter_tensor(rs_out, rs_in)
        want = (torch.arange(4 * N, device=dev, dtype=torch.float32) * (N * (N + 1) // 2))[4 * R:4 * R + 4]
        assert torch.equal(rs_out, want), rs_out.tolist()
        a_in = torch.arange(N * 3, device=dev, dtype=torch.int32) + 100 * R
        a_out = torch.empty(N * 3, device=dev, dtype=torch.int32)
        dist.all_to_all_single(a_out, a_in)
        want = torch.cat([torch.arange(3 * R, 3 * R + 3, device=dev, dtype=torch.int32) + 100 * r for r in range(N)])
        assert torch.equal(a_out, want), a_out.tolist()
    with check("all_to_all_single with uneven splits on cuda, one block large enough to go in pieces"):
        # Rank r sends rank s (r + 2 * s) % 5 * 1000 + 7 rows, rank 0 to rank 1 3 Mi more:
        # the ranks agree on that block's pieces.
        rows = [[(r + 2 * s) % 5 * 1000 + 7 + (3 << 20 if (r, s) == (0, 1 % N) else 0) for s in range(N)]
                for r in range(N)]
        a_in = torch.cat([torch.arange(rows[R][s], device=dev, dtype=torch.float32) % 4099 + 10000 * (R + 1) + s
                          for s in range(N)])
        recv = [rows[r][R] for r in range(N)]
        a_out = torch.full((sum(recv),), -1.0, device=dev)
        dist.all_to_all_single(a_out, a_in, output_split_sizes=recv, input_split_sizes=rows[R])
        want = torch.cat([torch.arange(rows[r][R], device=dev, dtype=torch.float32) % 4099 + 10000 * (r + 1) + R
                          for r in range(N)])
        assert torch.equal(a_out, want), (a_out != want).nonzero()[:4].tolist()
    with check("gather and scatter lists on cuda"):
        x = torch.full((7,), float(R), device=dev)
        outs = [torch.empty(7, device=dev) for _ in range(N)] if R == 0 else None
        dist.gather(x, outs, dst=0)
        if R == 0:
            assert all(torch.all(o == r).item() for r, o in enumerate(outs))
        y = torch.empty(7, device=dev)
        dist.scatter(y, [torch.full((7,), float(r), device=dev) for r in range(N)] if R == 0 else None, src=0)
        assert torch.all(y == R).item()
    with check("batch_isend_irecv ring on cuda"):
        nxt, prv = (R + 1) % N, (R - 1) % N
        got = torch.empty(1 << 20, device=dev)
        ops = [dist.P2POp(dist.isend, torch.full((1 << 20,), float(R), device=dev), nxt),
               dist.P2POp(dist.irecv, got, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert torch.all(got == prv).item()
    with check("cpu and cuda calls interleaved on one group keep their order"):
        for i in range(5):
            c = torch.full((10,), float(i + R))
            g = torch.full((1 << 16,), float(i * R), device=dev)
            wc = dist.all_reduce(c, async_op=True)
            dist.all_reduce(g)
            wc.wait()
            assert torch.all(c == N * i + N * (N - 1) / 2).item()
            assert torch.all(g == i * N * (N - 1) / 2).item()
    with check("a call with cpu and cuda tensors is refused, naming both devices"):
        try:
            dist.all_gather_into_tensor(torch.empty(N, device=dev), torch.ones(1))
            raise AssertionError("accepted")
        except ValueError as e:
            assert "one call takes tensors of one device" in str(e), str(e)
    with check("DDP on cuda: replicas stay identical"):
        torch.manual_seed(0)
        m = DDP(_mlp(torch, 0).to(dev), device_ids=[dev.index], bucket_cap_mb=0.01)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(R + 7)
        for _ in range(5):
            x = torch.randn(16, 32, generator=g).to(dev)
            loss = m(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        assert torch.equal(flat, ref), "replicas diverged"
    torch.cuda.synchronize()
    dist.destroy_process_group()


def scenario_gaps():
    """What gloo offers beyond the collectives: monitored_barrier (passing, and naming the
    rank that never arrives) and all_reduce of sparse COO tensors."""
    torch, dist = init_torch()
    short = datetime.timedelta(seconds=2)
    with check("monitored_barrier passes when every rank arrives"):
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)

    def sparse_input(rank, shape, sparse_dim):
        # Rank r holds rows r, r+1, ... every other one (overlapping between ranks), and rank 1
        # holds nothing at all.
        rows = [] if rank == 1 else list(range(rank % 3, shape[0], 2))
        if not rows:
            idx = torch.zeros((sparse_dim, 0), dtype=torch.int64)
            val = torch.zeros((0,) + tuple(shape[sparse_dim:]))
        else:
            cols = [(i * 7 + rank) % shape[1] for i in rows]
            idx = torch.tensor([rows, cols] if sparse_dim == 2 else [rows], dtype=torch.int64)
            val = torch.stack([torch.full(tuple(shape[sparse_dim:]), float(rank * 10 + i)) for i in rows])
        return torch.sparse_coo_tensor(idx, val, shape)

    for shape, sparse_dim in (((9, 5), 2), ((7, 4), 1)):
        with check(f"sparse all_reduce sums every rank's entries, shape {shape}, sparse_dim {sparse_dim}"):
            t = sparse_input(RANK, shape, sparse_dim)
            dist.all_reduce(t)
            assert t.is_sparse
            expected = sum(sparse_input(r, shape, sparse_dim).to_dense() for r in range(WORLD))
            assert torch.equal(t.to_dense(), expected), (t.to_dense(), expected)
    with check("sparse all_reduce refuses ops other than SUM"):
        try:
            dist.all_reduce(sparse_input(RANK, (4, 4), 2), op=dist.ReduceOp.MAX)
            raise AssertionError("MAX on a sparse tensor was accepted")
        except ValueError as e:
            assert "only SUM" in str(e), e

    # The last rank does not come: rank 0 names it; the others are told.
    late = WORLD - 1
    with check("monitored_barrier names the rank that does not arrive"):
        if RANK == late:
            time.sleep(short.total_seconds() + 1.5)
        else:
            try:
                dist.monitored_barrier(timeout=short)
                raise AssertionError("monitored_barrier passed without rank %d" % late)
            except RuntimeError as e:
                if RANK == 0:
                    assert f"Rank {late} failed to pass monitoredBarrier in 2000 ms" in str(e), e
                else:
                    assert "successfully reached monitoredBarrier" in str(e), e
    with check("monitored_barrier(wait_all_ranks=True) names every rank that does not arrive"):
        if RANK == 0:
            try:
                dist.monitored_barrier(timeout=short, wait_all_ranks=True)
                raise AssertionError("monitored_barrier passed alone")
            except RuntimeError as e:
                ranks = ", ".join(str(r) for r in range(1, WORLD))
                assert f"Ranks {ranks} failed to pass monitoredBarrier in 2000 ms" in str(e), e
        else:
            time.sleep(short.total_seconds() * (WORLD - 1) + 1.5)
    with check("the group still works after monitored_barrier failed"):
        t = torch.ones(4)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((4,), float(WORLD)))
    dist.destroy_process_group()


def scenario_leave():
    """destroy_process_group with the ranks leaving in the order BRAID_TEST_LEAVE gives
    ("first": rank 0, which hosts torch's store, leaves first; "last": it leaves last;
    "together": all at once, as a script's ranks that finish alike do)."""
    torch, dist = init_torch()
    with check("a collective before leaving"):
        t = torch.ones(8)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((8,), float(WORLD)))
    order = os.environ.get("BRAID_TEST_LEAVE", "first")
    if order == "together":
        # Within one check of the view apart, rank 0 (the store's host) first, each process
        # going as soon as its group is destroyed: a rank still leaving must not call the
        # store after its host has gone.
        time.sleep(0.04 * RANK)
    else:
        time.sleep(0.3 * (RANK if order == "first" else WORLD - RANK))
    with check("destroy_process_group returns"):
        dist.destroy_process_group()
    write_result()
    if order == "together":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _abort_group_and_exit(dist):
    """A broken group cannot say goodbye to everyone; abort instead of destroy so that exit
    does not wait on a dead or failed rank."""
    try:
        dist.distributed_c10d._abort_process_group() if hasattr(dist.distributed_c10d, "_abort_process_group") \
            else dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)


def scenario_kill():
    """The last rank dies (SIGKILL, no goodbye) after a first all_reduce; the survivors must
    raise from their next collectives within the group's timeout instead of hanging.
    BRAID_TEST_DEVICE=cuda: the same on CUDA tensors, where a call returns before it runs:
    the failure shows in a later call, and the stream is never left waiting."""
    timeout = float(os.environ.get("BRAID_TEST_GROUP_TIMEOUT", "10"))
    torch, dist = init_torch(timeout_s=timeout)
    on_gpu = os.environ.get("BRAID_TEST_DEVICE") == "cuda"
    dev = torch.device("cuda", RANK % torch.cuda.device_count()) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(dev)
    t = torch.ones(1 << 16, device=dev)
    dist.all_reduce(t)
    if on_gpu:
        torch.cuda.synchronize()
    if RANK == WORLD - 1:
        write_result()
        os.kill(os.getpid(), 9)
    with check("survivor raises"):
        start = time.monotonic()
        err = None
        try:
            for _ in range(1000):  # a few may still complete between the survivors
                dist.all_reduce(t)
                if on_gpu:
                    torch.cuda.synchronize()  # returns: a failed collective releases its stream
        except Exception as e:  # noqa: BLE001
            err = e
        elapsed = time.monotonic() - start
        extra["elapsed"] = elapsed
        extra["error_type"] = type(err).__name__ if err else None
        extra["error"] = str(err)[:1000] if err else None
        assert err is not None, "no error after the peer died"
        assert isinstance(err, RuntimeError), type(err)
        assert elapsed < timeout + 5, f"took {elapsed:.1f} s with a {timeout} s timeout"
    with check("later calls fail fast too"):
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4, device=dev))
            raise AssertionError("a collective succeeded on a broken group")
        except RuntimeError:
            pass
        assert time.monotonic() - start < timeout + 5
    write_result()
    _abort_group_and_exit(dist)


def scenario_held():
    """Ranks 1 and 2 (of 3) share a second group: rank 2 all-reduces there while ranks 0 and 1
    all-reduce on the world, so rank 2 waits for rank 1, which waits on the world. braid asks
    the processes where they are through torch's own store (its live view) and every rank
    raises within the groups' timeout; the world's error follows rank 2 into the other group
    and names the calls out of order."""
    timeout = 4
    torch, dist = init_torch(timeout_s=timeout)
    pair = dist.new_group([1, 2], backend="braid", timeout=datetime.timedelta(seconds=timeout))
    t = torch.ones(1 << 12)
    dist.all_reduce(t)  # everyone is there
    with check("every rank raises within the timeout, the world's error naming both groups"):
        err = timed_failure(lambda: dist.all_reduce(t, group=pair) if RANK == 2 else dist.all_reduce(t), keep=1500)
        elapsed = extra["elapsed"]
        assert err is not None, "the out-of-order calls completed"
        assert elapsed < timeout + 6, f"took {elapsed:.1f} s with a {timeout} s timeout"
        text = str(err)
        # Rank 2's own group is braid.pg<name>; the world is braid.
        assert "must call them in the same order" in text, text
        if RANK != 2:
            assert "communicator 'braid.pg" in text, text
    write_result()
    leave_after(dist, "held", [1, 2])


def scenario_status():
    """Rank 2 stays away (compute) while ranks 0 and 1 wait for it in an all_reduce:
    braid.torch.live_status() on rank 0, and python -m braid.torch.status from outside the
    job, show every rank and that rank 2, not in a collective, holds the others up;
    braid-info --status, pointed at torch's store, says to use the latter. Then rank 2 joins
    and the all_reduce completes."""
    import subprocess
    import braid.torch as bt
    torch, dist = init_torch(timeout_s=60)
    t = torch.ones(1 << 10)
    dist.all_reduce(t)
    store = dist.distributed_c10d._get_default_store()
    if RANK < 2:
        work = dist.all_reduce(t, async_op=True)
        if RANK == 0:
            time.sleep(0.5)  # both waits are older than the 100 ms a wait note needs
            with check("braid.torch.live_status on a rank shows who holds the others up"):
                report = bt.live_status(wait=1.0)
                extra["report"] = report
                assert "communicator 'braid' (3 ranks, epoch 0): 3 of 3 answered" in report, report
                assert "rank 2 holds up" in report and "it is not in a collective" in report, report
            with check("python -m braid.torch.status from outside the job"):
                addr = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
                out = subprocess.run([sys.executable, "-m", "braid.torch.status", addr, "--wait", "1"],
                                     capture_output=True, text=True, timeout=120)
                extra["cli"] = out.stdout[-2000:] + out.stderr[-2000:]
                assert out.returncode == 0, out.stderr
                assert "3 of 3 answered" in out.stdout and "rank 2 holds up" in out.stdout, out.stdout + out.stderr
            with check("braid-info --status on torch's store says to ask it through torch"):
                import braid
                info = os.path.join(os.path.dirname(os.path.abspath(braid.__file__)), "bin", "braid-info")
                out = subprocess.run([info, "--status", addr], capture_output=True, text=True, timeout=120)
                assert out.returncode == 1 and f"python -m braid.torch.status {addr}" in out.stderr, out.stderr
            with check("python -m braid.torch.status names a bad address"):
                out = subprocess.run([sys.executable, "-m", "braid.torch.status", "nohost"], capture_output=True,
                                     text=True, timeout=120)
                assert out.returncode == 2 and "is not HOST:PORT" in out.stderr, out.stderr
            store.set("status/go", "1")
        work.wait()
    else:
        store.wait(["status/go"], datetime.timedelta(seconds=120))
        dist.all_reduce(t)
    with check("the all_reduce completes once rank 2 joins"):
        assert torch.all(t == 9.0), t[:4]
    write_result()
    dist.destroy_process_group()


def scenario_status_after_leave():
    """Rank 2, which does not host torch's store, destroys its group and leaves; the view goes
    on for the others: braid.torch.live_status() on rank 0 still gets ranks 0 and 1's answers."""
    import braid.torch as bt
    torch, dist = init_torch(timeout_s=60)
    t = torch.ones(16)
    dist.all_reduce(t)
    store = dist.distributed_c10d._get_default_store()
    if RANK == 2:
        dist.destroy_process_group()
        store.set("leave/gone", "1")
        write_result()
        return
    store.wait(["leave/gone"], datetime.timedelta(seconds=60))
    time.sleep(0.3)  # more than one check of the view
    if RANK == 0:
        with check("the view answers after a rank that does not host the store left"):
            report = bt.live_status(wait=1.0)
            extra["report"] = report
            assert "communicator 'braid' (3 ranks, epoch 0): 2 of 3 answered" in report, report
        store.set("leave/asked", "1")
    else:
        store.wait(["leave/asked"], datetime.timedelta(seconds=60))
    write_result()
    dist.destroy_process_group()


def failing_braid_group(dist, timeout):
    """Creates a braid group that should fail: its error text, or None if it did not fail
    (recorded in `extra` with the time it took)."""
    start = time.monotonic()
    err = None
    try:
        dist.new_group(backend="braid", timeout=datetime.timedelta(seconds=timeout))
    except Exception as e:  # noqa: BLE001
        err = e
    extra["elapsed"] = time.monotonic() - start
    extra["error"] = str(err)[:1000] if err else None
    return None if err is None else str(err)


def leave_after(dist, tag, ranks):
    """Exits this process; rank 0, which hosts torch's store, first waits until each of
    `ranks` has said it is done (has read what failed)."""
    store = dist.distributed_c10d._get_default_store()
    if RANK == 0:
        store.wait([f"{tag}/done/{r}" for r in ranks], datetime.timedelta(seconds=20))
    else:
        store.set(f"{tag}/done/{RANK}", "1")
    os._exit(0)


def scenario_bad_setting():
    """Rank 1 alone has a malformed BRAID_NSLOTS when the ranks create a braid group (the
    default group is Gloo's). It joins only to say so: every rank's new_group raises at once
    with its reason, naming rank 1, not at the group's timeout."""
    timeout = 30
    torch, dist = init_torch(timeout_s=timeout, backend="gloo")
    if RANK == 1:
        os.environ["BRAID_NSLOTS"] = "abc"
    why = "BRAID_NSLOTS='abc' is not an integer in [2, 1024]"
    with check("new_group raises with rank 1's reason on every rank, long before the timeout"):
        err = failing_braid_group(dist, timeout)
        assert err is not None, "new_group succeeded with a malformed setting on rank 1"
        assert why in err, err[:1000]
        if RANK != 1:
            assert "rank 1 reported: " + why in err, err[:1000]
        assert extra["elapsed"] < timeout / 3, f"took {extra['elapsed']:.1f} s with a {timeout} s timeout"
    write_result()
    leave_after(dist, "badsetting", range(1, WORLD))


def scenario_init_kill():
    """Rank 1 dies (SIGKILL) while joining a new braid group, the others waiting for the last
    rank, which comes late. Every rank is on a "host" of its own (BRAID_HOST_ID), so no rank
    can watch another's pid, and torch's store cannot tell that a client is gone: the
    survivors' new_group must raise naming rank 1 within seconds (the joining ranks watch
    each other's heartbeats in the store), not at the group's timeout. (The default group is
    Gloo's: torch's own rendezvous waits for every rank before any backend starts.)"""
    import signal
    import threading

    timeout = 30
    os.environ["BRAID_HOST_ID"] = f"pytest-initkill-{RANK}"
    torch, dist = init_torch(timeout_s=timeout, backend="gloo")
    if RANK == WORLD - 1:
        time.sleep(float(os.environ.get("BRAID_TEST_LATE", "3")))
    if RANK == 1:
        write_result()
        threading.Timer(float(os.environ.get("BRAID_TEST_KILL_AFTER", "1")),
                        lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    with check("new_group raises naming rank 1, long before the timeout"):
        err = failing_braid_group(dist, timeout)
        assert err is not None, "new_group succeeded without rank 1"
        assert "rank 1 stopped while joining" in err, err[:1000]
        assert extra["elapsed"] < timeout / 2, f"took {extra['elapsed']:.1f} s with a {timeout} s timeout"
    write_result()
    leave_after(dist, "initkill", range(2, WORLD))  # the other survivor reads what failed


def scenario_mismatch():
    """Rank 0 broadcasts (it only sends) while the others all_reduce: every rank raises from
    that very call within seconds, the error showing both calls, and the group is then
    broken for everyone."""
    torch, dist = init_torch(timeout_s=30)
    t = torch.ones(1000)
    with check("every rank raises from the mismatched call"):
        err = timed_failure(lambda: dist.broadcast(t, src=0) if RANK == 0 else dist.all_reduce(t))
        elapsed = extra["elapsed"]
        assert err is not None, "the mismatched call succeeded"
        # ValueError where this rank found it (the caller's error), DistBackendError (a
        # RuntimeError) where a peer's report broke the group.
        extra["error_type"] = type(err).__name__
        assert isinstance(err, (ValueError, RuntimeError)), type(err)
        assert "collective mismatch" in str(err), str(err)
        assert "broadcast count=1000 float root=0" in str(err) and "allreduce count=1000 float sum" in str(err), \
            str(err)
        assert elapsed < 10, f"took {elapsed:.1f} s"
    with check("the next call fails too"):
        try:
            dist.all_reduce(torch.ones(4))
            raise AssertionError("a collective succeeded on a broken group")
        except (RuntimeError, ValueError):
            pass
    write_result()
    # Rank 0 serves torch's store: it stays until every rank is done with the store, or the
    # slower ranks would read "lost the job's store" instead of the mismatch.
    try:
        import datetime
        store = dist.distributed_c10d._get_default_store()
        store.set(f"mismatch-done/{RANK}", "1")
        store.wait([f"mismatch-done/{r}" for r in range(WORLD)], datetime.timedelta(seconds=30))
    except Exception:  # noqa: BLE001
        pass
    _abort_group_and_exit(dist)


# ------------------------------------------------------------------------------------------
# braid core bindings (NumPy)
# ------------------------------------------------------------------------------------------

def scenario_core():
    import numpy as np
    import braid

    comm = braid.Communicator.from_env()
    R, N = RANK, WORLD
    with check("rank and size"):
        assert comm.rank == R and comm.size == N
    for name in ("float32", "float64", "float16", "int8", "uint8", "int32", "uint32", "int64", "uint64"):
        dtype = np.dtype(name)
        for op in ("SUM", "PROD", "MAX", "MIN"):
            with check(f"allreduce {name} {op}"):
                # Values <= 3 so that a product over 4 ranks (<= 81) fits int8.
                per = [((np.arange(13) % 2) + (r % 2) + 1).astype(np.float64) for r in range(N)]
                x = per[R].astype(dtype)
                comm.allreduce(x, op=getattr(braid.ReduceOp, op))
                want = {"SUM": sum(per), "PROD": np.prod(per, axis=0), "MAX": np.max(per, axis=0),
                        "MIN": np.min(per, axis=0)}[op]
                np.testing.assert_allclose(x.astype(np.float64), want, rtol=1e-3)
    with check("allreduce AVG float64"):
        x = np.full(8, float(R))
        comm.allreduce(x, op=braid.ReduceOp.AVG)
        np.testing.assert_allclose(x, np.full(8, (N - 1) / 2))
    with check("allreduce into a separate recvbuf (read-only sendbuf)"):
        src = np.arange(10, dtype=np.float32) * (R + 1)
        src.setflags(write=False)
        dst = np.empty_like(src)
        comm.allreduce(src, dst)
        np.testing.assert_array_equal(dst, np.arange(10, dtype=np.float32) * (N * (N + 1) / 2))
        np.testing.assert_array_equal(src, np.arange(10, dtype=np.float32) * (R + 1))
    with check("multi-dimensional array and bytearray"):
        x = np.ones((4, 5, 6), dtype=np.int32)
        comm.allreduce(x)
        assert (x == N).all()
        b = bytearray([R + 1] * 7)
        comm.allreduce(b, op=braid.ReduceOp.MAX)
        assert list(b) == [N] * 7
    for root in range(N):
        with check(f"broadcast root {root}"):
            x = np.arange(100, dtype=np.int64) + 1000 * R
            comm.broadcast(x, root=root)
            np.testing.assert_array_equal(x, np.arange(100) + 1000 * root)
    with check("async allreduce and broadcast"):
        xs = [np.full(1 << 16, float(R + i), dtype=np.float32) for i in range(4)]
        works = [comm.allreduce_async(x) for x in xs]
        y = np.full(10, R, dtype=np.int32)
        wb = comm.broadcast_async(y, root=N - 1)
        for w in works:
            w.wait()
        wb.wait()
        assert wb.test() and works[0].is_completed()
        for i, x in enumerate(xs):
            assert (x == sum(r + i for r in range(N))).all()
        assert (y == N - 1).all()
    # The rest of the collective set, blocking and async.
    for root in range(N):
        with check(f"reduce to root {root} (in place and into recvbuf)"):
            x = np.arange(12, dtype=np.float64) * (R + 1)
            comm.reduce(x, root=root)
            want = np.arange(12) * (N * (N + 1) / 2)
            np.testing.assert_array_equal(x, want if R == root else np.arange(12) * (R + 1))
            src = np.full(5, R + 1, dtype=np.int32)
            dst = np.zeros(5, dtype=np.int32)
            comm.reduce(src, dst, op=braid.ReduceOp.MAX, root=root)
            np.testing.assert_array_equal(dst, np.full(5, N if R == root else 0))
    with check("allgather"):
        x = np.arange(7, dtype=np.float32) + 10 * R
        out = np.empty(7 * N, dtype=np.float32)
        comm.allgather(x, out)
        np.testing.assert_array_equal(out, np.concatenate([np.arange(7) + 10 * r for r in range(N)]))
    with check("reduce_scatter SUM and MIN"):
        x = np.arange(3 * N, dtype=np.int64) + R
        out = np.empty(3, dtype=np.int64)
        comm.reduce_scatter(x, out)
        np.testing.assert_array_equal(out, N * np.arange(3 * R, 3 * R + 3) + sum(range(N)))
        comm.reduce_scatter(x, out, op=braid.ReduceOp.MIN)
        np.testing.assert_array_equal(out, np.arange(3 * R, 3 * R + 3))
    with check("alltoall (separate recvbuf and in place)"):
        x = (np.arange(2 * N) + 100 * R).astype(np.int32)
        out = np.empty_like(x)
        comm.alltoall(x, out)
        want = np.concatenate([np.arange(2 * R, 2 * R + 2) + 100 * s for s in range(N)]).astype(np.int32)
        np.testing.assert_array_equal(out, want)
        comm.alltoall(x)
        np.testing.assert_array_equal(x, want)
    with check("gather and scatter"):
        root = N - 1
        x = np.full(4, R, dtype=np.uint8)
        out = np.empty(4 * N, dtype=np.uint8) if R == root else None
        comm.gather(x, out, root=root)
        if R == root:
            np.testing.assert_array_equal(out, np.repeat(np.arange(N), 4))
        src = (np.arange(3 * N, dtype=np.float64) * 2) if R == 0 else None
        got = np.empty(3)
        comm.scatter(src, got, root=0)
        np.testing.assert_array_equal(got, np.arange(3 * R, 3 * R + 3) * 2.0)
    with check("barrier"):
        comm.barrier()
        comm.barrier_async().wait()
    with check("async forms of the collective set"):
        a = np.full(6, R + 1.0)
        ag = np.empty(6 * N)
        rs = np.empty(2)
        at = np.arange(N, dtype=np.int64) + 10 * R
        at_out = np.empty(N, dtype=np.int64)
        ws = [comm.reduce_async(a.copy(), np.empty(6), root=0), comm.allgather_async(a, ag),
              comm.reduce_scatter_async(np.ones(2 * N), rs), comm.alltoall_async(at, at_out),
              comm.gather_async(a, np.empty(6 * N) if R == 0 else None, root=0),
              comm.scatter_async(np.ones(2 * N) if R == 0 else None, np.empty(2), root=0), comm.barrier_async()]
        for w in ws:
            w.wait()
        np.testing.assert_array_equal(ag, np.repeat(np.arange(1.0, N + 1), 6))
        np.testing.assert_array_equal(rs, np.full(2, float(N)))
        np.testing.assert_array_equal(at_out, np.arange(N) * 10 + R)
    with check("send/recv pair and send_recv ring, 8 MB (one batch cannot deadlock)"):
        if N >= 2:
            if R == 0:
                comm.send(np.arange(10, dtype=np.int64), 1)
                got = np.empty(10, dtype=np.int64)
                comm.recv(got, 1)
                np.testing.assert_array_equal(got, np.arange(10) * 2)
            elif R == 1:
                got = np.empty(10, dtype=np.int64)
                comm.recv(got, 0)
                comm.send(got * 2, 0)
        nxt, prv = (R + 1) % N, (R - 1) % N
        out = np.arange(2 << 20, dtype=np.float32) + R
        got = np.empty_like(out)
        comm.send_recv(sends=[(out, nxt)], recvs=[(got, prv)])
        np.testing.assert_array_equal(got, np.arange(2 << 20, dtype=np.float32) + prv)
        got2 = np.empty_like(out)
        w = comm.send_recv_async(sends=[(out, prv)], recvs=[(got2, nxt)])
        w.wait()
        np.testing.assert_array_equal(got2, np.arange(2 << 20, dtype=np.float32) + nxt)
    with check("send_async / recv_async (small, one direction)"):
        if R == 0:
            w = comm.send_async(np.full(8, 7.0), N - 1)
            w.wait()
        elif R == N - 1:
            got = np.empty(8)
            comm.recv_async(got, 0).wait()
            np.testing.assert_array_equal(got, np.full(8, 7.0))
    with check("split into even and odd ranks, and a negative color"):
        sub = comm.split(R % 2, key=-R)  # reversed order inside each half
        members = [r for r in range(N) if r % 2 == R % 2]
        assert sub.size == len(members), sub.size
        assert sub.rank == sorted(members, reverse=True).index(R), sub.rank
        x = np.full(3, float(R))
        sub.allreduce(x)
        np.testing.assert_array_equal(x, np.full(3, float(sum(members))))
        sub.close()
        none = comm.split(-1 if R == 0 else 0, key=R)
        if R == 0:
            assert none is None
        else:
            y = np.ones(2)
            none.allreduce(y)
            assert (y == N - 1).all()
            none.close()
    with check("bad sizes for the new collectives raise ValueError"):
        for call in (lambda: comm.allgather(np.ones(3), np.ones(3 * N + 1)),
                     lambda: comm.reduce_scatter(np.ones(2 * N + 1), np.ones(2)),
                     lambda: comm.alltoall(np.ones(N + 1) if N > 1 else np.ones(0.5)),
                     lambda: comm.gather(np.ones(2), None, root=R),
                     lambda: comm.send_recv(sends=[np.ones(2)])):
            try:
                call()
                raise AssertionError("accepted")
            except (ValueError, TypeError):
                pass
    with check("torch tensor through DLPack (bfloat16)"):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            t = torch.full((6,), float(R + 1), dtype=torch.bfloat16)
            comm.allreduce(t)
            assert torch.all(t == N * (N + 1) / 2)
    # Bad arguments: ValueError, raised locally before anything is sent.
    with check("non-contiguous array raises ValueError"):
        x = np.ones((4, 4), dtype=np.float32)[:, ::2]
        try:
            comm.allreduce(x)
            raise AssertionError("accepted")
        except ValueError as e:
            assert "contiguous" in str(e)
    with check("read-only in-place buffer raises ValueError"):
        x = np.ones(3, dtype=np.float32)
        x.setflags(write=False)
        try:
            comm.allreduce(x)
            raise AssertionError("accepted")
        except ValueError:
            pass
    with check("size mismatch raises ValueError"):
        try:
            comm.allreduce(np.ones(3, np.float32), np.ones(4, np.float32))
            raise AssertionError("accepted")
        except ValueError:
            pass
    with check("unsupported dtype raises ValueError"):
        try:
            comm.allreduce(np.ones(3, dtype=np.complex64))
            raise AssertionError("accepted")
        except ValueError:
            pass
    with check("bad root raises ValueError"):
        try:
            comm.broadcast(np.ones(3, np.float32), root=N)
            raise AssertionError("accepted")
        except ValueError:
            pass
    with check("still works after rejected calls"):
        x = np.ones(5, dtype=np.float64)
        comm.allreduce(x)
        assert (x == N).all()
    comm.close()
    with check("closed communicator raises ValueError"):
        try:
            comm.allreduce(np.ones(1))
            raise AssertionError("accepted")
        except ValueError:
            pass


def scenario_core_kill():
    """Core bindings: the last rank dies; survivors get braid.RemoteError naming it (or
    braid.TimeoutError) within BRAID_TIMEOUT."""
    import numpy as np
    import braid

    comm = braid.Communicator.from_env()
    x = np.ones(1 << 16, dtype=np.float32)
    comm.allreduce(x)
    if RANK == WORLD - 1:
        write_result()
        os.kill(os.getpid(), 9)
    with check("survivor raises braid error"):
        start = time.monotonic()
        err = None
        try:
            for _ in range(1000):
                comm.allreduce(x)
        except braid.Error as e:
            err = e
        extra["elapsed"] = time.monotonic() - start
        assert err is not None
        extra["error_type"] = type(err).__name__
        extra["error"] = str(err)[:1000]
        extra["error_rank"] = err.rank
        assert isinstance(err, (braid.RemoteError, braid.TimeoutError)), type(err)
        assert isinstance(err, RuntimeError)
        if isinstance(err, braid.RemoteError):
            assert err.rank in (-1,) + tuple(range(WORLD)), err.rank
    write_result()
    os._exit(0)


def scenario_core_recover():
    """Core bindings: the last rank dies; the survivors agree on who failed, shrink it away
    and go on with a correct allreduce; then revoke makes every rank raise RevokedError."""
    import numpy as np
    import braid

    comm = braid.Communicator.from_env()
    x = np.ones(1 << 12, dtype=np.float32)
    comm.allreduce(x)
    if RANK == WORLD - 1:
        write_result()
        os.kill(os.getpid(), 9)
    ok = 1
    try:
        for _ in range(1000):
            comm.allreduce(x)
    except braid.Error:
        ok = 0
    with check("agree names the dead rank on every survivor"):
        flag, failed = comm.agree(ok)
        extra["failed"] = failed
        assert flag == 0 and failed == [WORLD - 1], (flag, failed)
    with check("shrink gives the survivors a working communicator"):
        small = comm.shrink(failed)
        assert small.size == WORLD - 1 and small.rank == RANK, (small.size, small.rank)
        y = np.full(8, RANK + 1, dtype=np.float32)
        small.allreduce(y)
        assert y[0] == (WORLD - 1) * WORLD / 2, y
    with check("revoke makes every rank raise RevokedError"):
        if small.rank == 0:
            small.revoke()
        try:
            for _ in range(1000):
                small.allreduce(y)
            raise AssertionError("no error after revoke")
        except braid.RevokedError as e:
            extra["revoked"] = str(e)[:300]
    if RANK == 0:
        # Rank 0 serves the store here (as under torchrun): it stays until the others have
        # read the revocation.
        time.sleep(3)
    write_result()
    os._exit(0)


if __name__ == "__main__":
    scenario = sys.argv[1]
    try:
        globals()["scenario_" + scenario]()
    except Exception:  # noqa: BLE001 - a setup failure is a result too
        checks["scenario setup"] = traceback.format_exc()[-3000:]
    write_result()
