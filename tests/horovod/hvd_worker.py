"""One rank of a Horovod-on-braid test: an unchanged Horovod script in spirit (import
horovod.torch as hvd, hvd.init(), ...), run by braidrun or horovodrun. Every check records
None (passed) or its error; the rank writes them as JSON to $BRAID_TEST_OUT/rank<R>.json.

    hvd_worker.py ops      every op x dtype x process set, orders, fusion, errors, join, objects,
                           DistributedOptimizer, shutdown and init again
    hvd_worker.py kill     the last rank dies mid-training; the others must raise
                           HorovodInternalError within BRAID_TIMEOUT
    hvd_worker.py stop     the same with the last rank stopped (SIGSTOP) instead: alive, silent
    hvd_worker.py elastic  Horovod's elastic loop (hvd.elastic.run, TorchState) losing and gaining
                           workers; writes $BRAID_TEST_OUT/pid<P>.json (see scenario_elastic)
"""

import json
import os
import signal
import sys
import time
import traceback

import torch
import horovod.torch as hvd

CHECKS = {}


def check(name):
    def run(fn):
        try:
            fn()
            CHECKS[name] = None
        except Exception:  # noqa: BLE001 - every failure is a result
            CHECKS[name] = traceback.format_exc(limit=4)[-1500:]
        return fn
    return run


def write_result(extra=None):
    out = os.environ["BRAID_TEST_OUT"]
    res = {"checks": CHECKS}
    res.update(extra or {})
    with open(os.path.join(out, "rank%d.json" % hvd.rank()), "w") as f:
        json.dump(res, f)


REDUCE_TYPES = [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
MOVE_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
              torch.float64]


def value(rank, shape, dtype, salt=0):
    """A tensor every rank can recompute for any other rank: small integers, exact in fp16."""
    n = 1
    for d in shape:
        n *= d
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + salt) % 11 - 5
    return base.reshape(shape).to(dtype)


def adasum_input(rank, shape, index):
    """Tensor `index` of rank `rank`'s Adasum input, in float64: a part every rank shares
    plus a part of its own; tensor 3 is zero on rank 0."""
    n = 1
    for d in shape:
        n *= d
    k = torch.arange(n, dtype=torch.float64)
    v = torch.cos(k * 0.7 + index) + 0.5 * torch.sin(k * (1.3 + rank) + 2 * rank)
    if index == 3 and rank == 0:
        v = torch.zeros(n, dtype=torch.float64)
    return v.reshape(shape)


def adasum_reference(vectors):
    """Horovod's Adasum of the ranks' tensors in float64: pairs (r, r ^ 1) combine, then pairs
    of pairs, the lower ranks' vector as `a`; a coefficient is 1 where a norm is tiny."""
    vs = [v.reshape(-1) for v in vectors]
    level = 1
    while level < len(vs):
        nxt = []
        for r in range(len(vs)):
            a, b = (vs[r], vs[r ^ level]) if r & level == 0 else (vs[r ^ level], vs[r])
            dot, aa, bb = float((a * b).sum()), float((a * a).sum()), float((b * b).sum())
            ca = 1 - dot / aa * 0.5 if aa >= 1e-8 else 1.0
            cb = 1 - dot / bb * 0.5 if bb >= 1e-8 else 1.0
            nxt.append(ca * a + cb * b)
        vs = nxt
        level <<= 1
    return vs[0].reshape(vectors[0].shape)


def scenario_ops():
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"  # add_process_set after init
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    @check("identity")
    def _():
        assert 0 <= rank < size and size == int(os.environ.get("EXPECT_SIZE", size))
        assert hvd.local_size() == size and hvd.local_rank() == rank, (hvd.local_rank(), hvd.local_size())
        assert hvd.cross_size() == 1 and hvd.cross_rank() == 0
        assert hvd.is_initialized() and hvd.gloo_built() and not hvd.mpi_built() and not hvd.nccl_built()

    shapes = [(5,), (3, 4), (2, 3, 5), (0,)]

    @check("allreduce sum/average/min/max/product, every dtype")
    def _():
        for dtype in REDUCE_TYPES:
            for shape in shapes:
                xs = [value(r, shape, dtype).double() for r in range(size)]
                x = value(rank, shape, dtype)
                got = hvd.allreduce(x, op=hvd.Sum, name="s.%s.%s" % (dtype, shape))
                assert torch.equal(got.double(), sum(xs)), (dtype, shape, got)
                got = hvd.allreduce(x, op=hvd.Min, name="min.%s.%s" % (dtype, shape))
                assert torch.equal(got.double(), torch.stack(xs).min(0).values if xs[0].numel() else xs[0])
                got = hvd.allreduce(x, op=hvd.Max)
                assert torch.equal(got.double(), torch.stack(xs).max(0).values if xs[0].numel() else xs[0])
                avg = hvd.allreduce(x, op=hvd.Average)
                want = sum(xs) / size
                if not dtype.is_floating_point:
                    want = torch.trunc(want)
                assert torch.allclose(avg.double(), want, atol=1e-2), (dtype, shape, avg, want)
            ones = torch.full((4,), 2, dtype=dtype)
            assert torch.equal(hvd.allreduce(ones, op=hvd.Product).double(), torch.full((4,), 2.0 ** size))

    @check("allreduce in place, prescale and postscale")
    def _():
        x = value(rank, (6,), torch.float32)
        want = sum(value(r, (6,), torch.float32) for r in range(size))
        hvd.allreduce_(x, op=hvd.Sum)
        assert torch.equal(x, want)
        y = hvd.allreduce(value(rank, (6,), torch.float64), op=hvd.Sum, prescale_factor=0.5,
                          postscale_factor=3.0)
        assert torch.allclose(y, 1.5 * sum(value(r, (6,), torch.float64) for r in range(size)))

    @check("grouped allreduce")
    def _():
        ts = [value(rank, (i + 1, 3), torch.float32, salt=i) for i in range(5)]
        outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="grp")
        for i, o in enumerate(outs):
            assert torch.equal(o, sum(value(r, (i + 1, 3), torch.float32, salt=i) for r in range(size)))

    @check("async ops submitted in a different order on every rank, fused")
    def _():
        names = ["t%d" % i for i in range(40)]
        order = names[rank:] + names[:rank]
        if rank % 2:
            order.reverse()
        handles = {n: hvd.allreduce_async(value(rank, (17,), torch.float32, salt=int(n[1:])), name=n, op=hvd.Sum)
                   for n in order}
        for n in names:
            got = hvd.synchronize(handles[n])
            assert torch.equal(got, sum(value(r, (17,), torch.float32, salt=int(n[1:])) for r in range(size))), n

    @check("the steady state: the same names again and again")
    def _():
        for step in range(20):
            hs = [hvd.allreduce_async(torch.full((8,), float(rank + step)), name="steady%d" % i, op=hvd.Sum)
                  for i in range(6)]
            for h in hs:
                got = hvd.synchronize(h)
                assert torch.equal(got, torch.full((8,), float(sum(range(size)) + size * step)))

    @check("allgather, uneven first dimension, every dtype")
    def _():
        for dtype in MOVE_TYPES:
            x = value(rank, (rank + 1, 3), dtype)
            got = hvd.allgather(x)
            want = torch.cat([value(r, (r + 1, 3), dtype) for r in range(size)])
            assert torch.equal(got, want), dtype
        outs = hvd.grouped_allgather([torch.full((rank + 1,), rank), torch.full((2, 2), rank)])
        assert outs[0].tolist() == sum(([r] * (r + 1) for r in range(size)), [])
        assert outs[1].shape == (2 * size, 2)

    @check("broadcast from every root, every dtype, in place too")
    def _():
        for dtype in MOVE_TYPES:
            for root in range(size):
                got = hvd.broadcast(value(rank, (4, 2), dtype), root_rank=root)
                assert torch.equal(got, value(root, (4, 2), dtype)), (dtype, root)
        x = torch.full((3,), float(rank))
        hvd.broadcast_(x, root_rank=size - 1)
        assert x.tolist() == [float(size - 1)] * 3

    @check("alltoall with and without splits")
    def _():
        x = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
        got = hvd.alltoall(x)
        assert got.tolist() == [100 * r + 2 * rank + k for r in range(size) for k in range(2)], got
        splits = [(rank + p) % 3 for p in range(size)]
        rows = sum(splits)
        x = torch.full((rows, 2), rank, dtype=torch.int64)
        got, received = hvd.alltoall(x, splits=splits)
        assert received.tolist() == [(r + rank) % 3 for r in range(size)], received
        assert got[:, 0].tolist() == sum(([r] * ((r + rank) % 3) for r in range(size)), [])

    @check("reducescatter sum and average, uneven rows, grouped")
    def _():
        for rows in (size * 2, size * 2 + 1):
            x = value(rank, (rows, 3), torch.float32)
            got = hvd.reducescatter(x, op=hvd.Sum)
            full = sum(value(r, (rows, 3), torch.float32) for r in range(size))
            start = sum(rows // size + (1 if r < rows % size else 0) for r in range(rank))
            mine = rows // size + (1 if rank < rows % size else 0)
            assert torch.equal(got, full[start:start + mine]), (rows, got)
            avg = hvd.reducescatter(x, op=hvd.Average)
            assert torch.allclose(avg, full[start:start + mine] / size)
        outs = hvd.grouped_reducescatter([torch.ones(size * 2), torch.ones(size, 2)], op=hvd.Sum)
        assert outs[0].tolist() == [float(size)] * 2 and outs[1].tolist() == [[float(size)] * 2]

    @check("dynamic process sets, each op")
    def _():
        evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
        odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
        mine = evens if rank % 2 == 0 else odds
        members = mine.ranks
        assert mine.size() == len(members) and mine.rank() == members.index(rank)
        got = hvd.allreduce(torch.full((3,), float(rank)), op=hvd.Sum, process_set=mine)
        assert got.tolist() == [float(sum(members))] * 3
        got = hvd.allgather(torch.full((1,), rank), process_set=mine)
        assert got.tolist() == members
        got = hvd.broadcast(torch.full((2,), rank), root_rank=members[-1], process_set=mine)
        assert got.tolist() == [members[-1]] * 2
        hvd.barrier(process_set=mine)
        # Every rank adds and removes sets in the same order, as Horovod requires.
        if odds is not None:
            assert hvd.remove_process_set(odds)
        assert hvd.remove_process_set(evens)

    @check("a shape mismatch fails every rank, naming the tensor and the ranks")
    def _():
        if size == 1:
            return
        try:
            hvd.allreduce(torch.ones(3 + rank), name="mismatched")
        except RuntimeError as e:  # HorovodInternalError is a RuntimeError
            assert "mismatched" in str(e) and "rank 0" in str(e) and "rank 1" in str(e), str(e)
        else:
            raise AssertionError("no error")

    @check("a dtype mismatch fails every rank")
    def _():
        if size == 1:
            return
        t = torch.ones(4, dtype=torch.float32 if rank % 2 else torch.float64)
        try:
            hvd.allreduce(t, name="dtypes")
        except RuntimeError as e:
            assert "dtypes" in str(e) and "Float" in str(e) and "Double" in str(e), str(e)
        else:
            raise AssertionError("no error")

    @check("a name used twice before completion is a ValueError")
    def _():
        if size == 1:
            return
        # Rank 0 tries the name again while its first call waits for the others', which come
        # half a second later: the first cannot have completed, however the ranks are
        # scheduled (asked on every rank at once, a fast pair could finish in between).
        if rank != 0:
            time.sleep(0.5)
        h = hvd.allreduce_async(torch.ones(2), name="twice")
        if rank == 0:
            try:
                hvd.allreduce_async(torch.ones(2), name="twice")
            except ValueError as e:
                assert "twice" in str(e), str(e)
            else:
                raise AssertionError("no ValueError")
        hvd.synchronize(h)

    @check("Adasum: the pairwise adaptive sum, per tensor of a fused group, the same on every rank")
    def _():
        if size & (size - 1):
            # Horovod's front end refuses it before braid's core sees it.
            try:
                hvd.allreduce(torch.ones(2), op=hvd.Adasum)
            except NotImplementedError as e:
                assert "power of 2" in str(e), str(e)
            else:
                raise AssertionError("no error for Adasum on %d ranks" % size)
            return
        tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1, torch.float32: 1e-5, torch.float64: 1e-12}
        # The last tensor makes the fused buffer large enough for the halving form (64 KiB and
        # up in braid's core); the small ones lie in one rank's stretch at every level there,
        # so they come out as they do alone.
        shapes = [(5,), (3, 4), (0,), (64,), (40000,)]
        for dtype, t in tol.items():
            # Rank-dependent values with a part shared by all (so the dot products are not 0),
            # and one tensor that is zero on rank 0 (its coefficient is then 1).
            ins = [adasum_input(rank, s, i) for i, s in enumerate(shapes)]
            outs = hvd.grouped_allreduce([x.to(dtype) for x in ins], op=hvd.Adasum, name="adasum_%s" % dtype)
            single = hvd.allreduce(ins[1].to(dtype), op=hvd.Adasum, name="adasum1_%s" % dtype)
            for i, s in enumerate(shapes):
                want = adasum_reference([adasum_input(r, s, i) for r in range(size)])
                got = outs[i].to(torch.float64)
                assert got.shape == want.shape, (dtype, s, got.shape)
                assert torch.allclose(got, want, rtol=t, atol=t), (str(dtype), s, got, want)
            assert torch.equal(single, outs[1]), (str(dtype), single, outs[1])
            every = hvd.allgather(torch.cat([o.reshape(-1) for o in outs]).to(torch.float64).unsqueeze(0))
            for r in range(size):
                assert torch.equal(every[r], every[0]), "rank %d's Adasum result differs from rank 0's" % r
        # The defining cases (as Horovod's own Adasum tests put them): vectors orthogonal to
        # each other add up; vectors along one line average. Relative error under 100 eps.
        for dtype in (torch.float32, torch.float64):
            eps = torch.finfo(dtype).eps
            for n in (size * 20 - 17, 4096, 20000):
                gen = torch.Generator().manual_seed(n)
                q, _ = torch.linalg.qr(torch.randn(n, size, dtype=torch.float64, generator=gen))
                q = q.to(dtype).to(torch.float64)
                line = torch.randn(n, 1, dtype=torch.float64, generator=gen) @ \
                    torch.randn(1, size, dtype=torch.float64, generator=gen)
                line = line.to(dtype).to(torch.float64)
                for what, cols, want in (("orthogonal", q, q.sum(dim=1)), ("parallel", line, line.mean(dim=1))):
                    got = hvd.allreduce(cols[:, rank].to(dtype).contiguous(), op=hvd.Adasum,
                                        name="adasum_%s_%d_%s" % (what, n, dtype)).to(torch.float64)
                    rel = float((got - want).norm() / want.norm())
                    assert rel < 100 * eps, (what, n, str(dtype), rel)
                    every = hvd.allgather(got.unsqueeze(0))
                    for r in range(size):
                        assert torch.equal(every[r], every[0]), "rank %d's result differs (%s, %d)" % (r, what, n)
        try:
            hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
        except RuntimeError as e:
            assert "Adasum" in str(e) and "int" in str(e), str(e)
        else:
            raise AssertionError("no error for an integer Adasum")

    @check("DistributedOptimizer with op=Adasum: same model everywhere")
    def _():
        if size & (size - 1):
            return
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), op=hvd.Adasum)
        torch.manual_seed(200 + rank)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        allp = hvd.allgather(flat.unsqueeze(0))
        for r in range(size):
            assert torch.equal(allp[r], flat), "rank %d's model differs" % r

    @check("join with uneven data: joined ranks contribute zeros, join returns the last rank")
    def _():
        steps = rank + 1  # rank r has r+1 batches
        for s in range(steps):
            got = hvd.allreduce(torch.ones(5), op=hvd.Sum, name="batch")
            active = sum(1 for r in range(size) if r + 1 > s)
            assert got.tolist() == [float(active)] * 5, (s, got)
        last = hvd.join()
        assert last == size - 1, last

    @check("broadcast_object and allgather_object")
    def _():
        obj = hvd.broadcast_object({"rank": rank, "list": list(range(rank + 2))}, root_rank=0)
        assert obj == {"rank": 0, "list": [0, 1]}
        objs = hvd.allgather_object(("r", rank))
        assert objs == [("r", r) for r in range(size)]

    @check("DistributedOptimizer: fp16 compression, backward_passes_per_step, predivide, same model everywhere")
    def _():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       compression=hvd.Compression.fp16, backward_passes_per_step=2,
                                       gradient_predivide_factor=2.0)
        torch.manual_seed(100 + rank)
        for _ in range(3):
            opt.zero_grad()
            for _ in range(2):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                loss.backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        allp = hvd.allgather(flat.unsqueeze(0))
        for r in range(size):
            assert torch.equal(allp[r], flat), "rank %d's model differs" % r

    @check("the timeline: Chrome-trace JSON with negotiation, the op and its activities")
    def _():
        path = os.path.join(os.environ["BRAID_TEST_OUT"], "timeline.json")
        hvd.start_timeline(path, mark_cycles=True)
        hs = [hvd.allreduce_async(torch.ones(4), name="tl.%d" % i) for i in range(3)]
        for h in hs:
            hvd.synchronize(h)
        hvd.broadcast(torch.ones(2), root_rank=0, name="tl.b")
        time.sleep(0.05)
        hvd.stop_timeline()
        hvd.barrier()
        if rank != 0:
            return  # only rank 0 writes a timeline, as in Horovod
        events = json.load(open(path))
        names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
        assert "allreduce.tl.0" in names.values() and "broadcast.tl.b" in names.values(), names
        what = {e.get("name") for e in events}
        for w in ("NEGOTIATE_ALLREDUCE", "ALLREDUCE", "BRAID_ALLREDUCE", "NEGOTIATE_BROADCAST", "BROADCAST",
                  "BRAID_BROADCAST", "CYCLE_START"):
            assert w in what, (w, what)
        depth = {}
        for e in events:
            if e["ph"] == "B":
                depth[e["pid"]] = depth.get(e["pid"], 0) + 1
            elif e["ph"] == "E":
                depth[e["pid"]] -= 1
                assert depth[e["pid"]] >= 0, names[e["pid"]]
        assert all(d == 0 for d in depth.values()), {names[p]: d for p, d in depth.items() if d}

    @check("shutdown, then init again with a static process set")
    def _():
        hvd.shutdown()
        assert not hvd.is_initialized()
        firsts = hvd.ProcessSet(list(range((size + 1) // 2)))
        hvd.init(process_sets=[firsts])
        assert hvd.size() == size and hvd.rank() == rank
        got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.reinit")
        assert got.tolist() == [float(size)] * 3
        if rank in firsts.ranks:
            got = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=firsts)
            assert got.tolist() == [float(len(firsts.ranks))] * 2
        hvd.barrier()  # a rank that shut down early would end the others' operations

    write_result()
    hvd.shutdown()


def scenario_kill(sig=signal.SIGKILL):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    victim = size - 1
    start = None
    err = None
    try:
        for step in range(100000):
            if step == 20:
                start = time.monotonic()
                if rank == victim:
                    os.kill(os.getpid(), sig)
            hvd.allreduce(torch.ones(1000), name="grad", op=hvd.Sum)
    except hvd.HorovodInternalError as e:
        err = str(e)
    CHECKS["survivor raised HorovodInternalError"] = None if err else "no error raised"
    elapsed = time.monotonic() - start if start else None
    write_result({"error": err, "elapsed": elapsed})


def elastic_grad(step, index, rank, size, like):
    """Rank `rank`'s gradient for parameter `index` at `step`: the ranks' values average to
    step + 1 + index whatever the world size (their offsets 2r - (size - 1) cancel), in
    integers, so the parameters after the committed steps are known exactly and a rank
    counted twice or missed shows."""
    return torch.full_like(like, float(step + 1 + index + 2 * rank - (size - 1)))


def scenario_elastic():
    """Horovod's elastic loop over a small model, one committed step at a time. Faults come
    from the environment:
      ELASTIC_STEPS=N         steps to run (default 30)
      ELASTIC_KILL=R:S        the process that began the run as rank R kills itself at step S
      ELASTIC_KILL_HOST=H:S   a process on host H (HOROVOD_HOSTNAME) kills itself at step S
      ELASTIC_ADD=S:FILE      rank 0 appends FILE.add to FILE at step S (a host discovery
                              script that prints FILE then offers more slots)
      ELASTIC_FINAL_SIZE=N    after the last step, keep committing (up to 120 s) until the
                              job is N processes again: a replacement still starting Python
                              is then admitted rather than left out when the steps run out
    Every process that finishes writes pid<P>.json: its final rank and size, the sizes it
    saw, its resets, the last step and whether the parameters are the exact expected ones."""
    steps = int(os.environ.get("ELASTIC_STEPS", "30"))
    kill = os.environ.get("ELASTIC_KILL")
    kill_host = os.environ.get("ELASTIC_KILL_HOST")
    add = os.environ.get("ELASTIC_ADD")
    final_size = int(os.environ.get("ELASTIC_FINAL_SIZE", "0"))
    hvd.init()
    torch.manual_seed(1234)
    model = torch.nn.Linear(4, 3).double()
    initial = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
    log = {"first_rank": hvd.rank(), "joined": os.environ.get("BRAID_ELASTIC_JOIN") == "1", "started_at": None,
           "sizes": [hvd.size()], "resets": 0, "added": False}

    def on_reset():
        log["resets"] += 1
        log["sizes"].append(hvd.size())
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        if log["started_at"] is None:
            log["started_at"] = state.step
        while state.step < steps:
            s = state.step
            original = log["started_at"] == 0 and not log["joined"]
            if kill and original and "%d:%d" % (log["first_rank"], s) == kill:
                os.kill(os.getpid(), signal.SIGKILL)
            if kill_host and "%s:%d" % (os.environ.get("HOROVOD_HOSTNAME"), s) == kill_host:
                os.kill(os.getpid(), signal.SIGKILL)
            if add and hvd.rank() == 0 and not log["added"] and s == int(add.split(":", 1)[0]):
                path = add.split(":", 1)[1]
                with open(path + ".add") as src, open(path, "a") as dst:
                    dst.write(src.read())
                log["added"] = True
            rank, size = hvd.rank(), hvd.size()
            for i, p in enumerate(model.parameters()):
                p.grad = hvd.allreduce(elastic_grad(s, i, rank, size, p), name="grad%d" % i, op=hvd.Average)
            opt.step()
            time.sleep(0.05)
            state.step = s + 1
            state.commit()
        # Admission happens at a commit: with the steps done, commit until the job is whole.
        deadline = time.time() + 120
        while hvd.size() < final_size and time.time() < deadline:
            time.sleep(0.1)
            state.commit()

    train(state)
    expected = [p0 - sum(float(s + 1 + i) for s in range(steps)) for i, p0 in enumerate(initial)]
    exact = all(torch.equal(p.detach(), e) for p, e in zip(model.parameters(), expected))
    out = os.environ["BRAID_TEST_OUT"]
    res = dict(log, pid=os.getpid(), rank=hvd.rank(), size=hvd.size(), step=state.step, params_exact=exact,
               checksum=float(sum(p.detach().sum() for p in model.parameters())))
    with open(os.path.join(out, "pid%d.json" % os.getpid()), "w") as f:
        json.dump(res, f)
    hvd.shutdown()


if __name__ == "__main__":
    {"ops": scenario_ops, "kill": scenario_kill, "elastic": scenario_elastic,
     "stop": lambda: scenario_kill(signal.SIGSTOP)}[sys.argv[1]]()
