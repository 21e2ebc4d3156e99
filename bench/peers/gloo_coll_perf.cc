// gloo_coll_perf.cc - Gloo's collectives over TCP on 127.0.0.1, timed the way braid's
// *_perf tools time braid's, for the peer comparison in scripts/bench_collectives.sh.
//
//   gloo_coll_perf -N 4 -C allgather -b 1M -e 256M -f 4      forks 4 ranks of itself
//   RANK=r SIZE=n GLOO_STORE_DIR=/dir gloo_coll_perf ...     one rank, started by someone else
//
// Built against Debian's libgloo-dev (a 2022 snapshot of Gloo). Collectives (-C, comma list
// or "all"), float data, sum where there is a reduction:
//   allreduce       old-style in-place classes, one table per -A algorithm:
//                   ring_chunked, halving_doubling (default both), ring, bcube;
//                   or the new-style gloo::allreduce (out of place): new_ring, new_bcube
//   broadcast       gloo::broadcast (out of place)
//   reduce          gloo::reduce
//   allgather       gloo::allgather
//   reduce_scatter  gloo::ReduceScatterHalvingDoubling (old-style, in place: the whole input
//                   is reduced into the buffer, which ends up holding this rank's block first)
//   alltoall        gloo::alltoall
//   gather          gloo::gather
//   scatter         gloo::scatter
//   sendrecv        unbound-buffer send to rank+1 and recv from rank-1 (a ring), which is
//                   what Gloo offers for point-to-point; not a Gloo collective
//
// Sizes, table and bus bandwidth are those of braid's tools and nccl-tests: size = one
// rank's message for allreduce/broadcast/reduce/sendrecv, the whole n-block buffer for
// allgather/reduce_scatter/alltoall/gather/scatter; busbw = algbw * 2(n-1)/n (allreduce),
// * 1 (broadcast, reduce, sendrecv), * (n-1)/n (the rest). Columns: 1 size (B), 2 count,
// 3 type, 4 redop, 5 root, 6 time (us), 7 algbw, 8 busbw (GB/s, 1e9 B), 9 #wrong, 10 iters,
// 11 p50 (us, median of individually timed calls, max over ranks - Gloo's TCP path has
// occasional stalls of tens of ms, which inflate the mean but not the median).
// time: each rank's mean per call over the timed loop, combined over ranks as -a says
// (0 rank 0's, 1 mean (default), 2 min, 3 max), as in braid's tools.
//
// Check (-c 1): after timing, inputs are refilled, receive buffers set to a sentinel, one
// more call is made and every element a rank should hold is compared with a reference
// computed here (exact small integers: reductions get (r+1)*((i%7)+1) from rank r, data
// movement ((src*31 + (dst+1)*7 + i) % 1021)). #wrong is summed over ranks.
//
// Every collective (and allreduce algorithm) gets its own freshly connected context; the
// barriers and scalar reductions of the harness run on a separate one. (On this Gloo
// snapshot, using old-style pair buffers and new-style operations on one context made the
// new-style calls much slower.) Gloo's TCP pair pins SO_SNDBUF to the largest message sent
// so far on a socket; with -P 1 (default) each context first runs its collective once at the
// largest size, so a sweep does not depend on its order.
//
// Options: -N ranks (2), -b min (1M), -e max (256M), -f factor (2), -w warmup (5),
//   -n iters (20), -S B scale iterations by B/size above B (0 = never), -m min iters (3),
//   -c check (1), -a average (1), -r root (0), -C collectives (allreduce),
//   -A allreduce algorithms (ring_chunked,halving_doubling), -H host (127.0.0.1), -P prime (1).

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Config {
  int nprocs = 2;
  size_t minBytes = size_t(1) << 20, maxBytes = size_t(256) << 20, scaleAbove = 0;
  int factor = 2, warmup = 5, iters = 20, minIters = 3, check = 1, average = 1, root = 0, prime = 1;
  std::string colls = "allreduce";
  std::string algs = "ring_chunked,halving_doubling";
  std::string host = "127.0.0.1";
};

const char* const kColls[] = {"allreduce", "broadcast", "reduce",  "allgather", "reduce_scatter",
                              "alltoall",  "gather",    "scatter", "sendrecv"};

size_t parseBytes(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (*end == 'k' || *end == 'K') v *= 1024.0;
  if (*end == 'm' || *end == 'M') v *= 1024.0 * 1024.0;
  if (*end == 'g' || *end == 'G') v *= 1024.0 * 1024.0 * 1024.0;
  return size_t(v);
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    if (comma > pos) out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

double seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void addFloats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}
void addDoubles(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  auto* x = static_cast<const double*>(a);
  auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}
void maxDoubles(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  auto* x = static_cast<const double*>(a);
  auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; i++) o[i] = std::max(x[i], y[i]);
}
void minDoubles(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  auto* x = static_cast<const double*>(a);
  auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; i++) o[i] = std::min(x[i], y[i]);
}

// The harness's own traffic (barriers, statistics) on the "stats" context, new-style only.
class Stats {
 public:
  explicit Stats(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)) {}
  double reduce(double v, gloo::AllreduceOptions::Func fn) {
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(&v, 1);
    o.setReduceFunction(fn);
    o.setTag(tag_++);
    gloo::allreduce(o);
    return v;
  }
  void barrier() {
    gloo::BarrierOptions o(ctx_);
    o.setTag(tag_++);
    gloo::barrier(o);
  }
  // A rank's mean time combined as braid's tools do (-a).
  double combineTime(double t, int average) {
    const int n = ctx_->size;
    if (average == 0) return reduce(ctx_->rank == 0 ? t : 0.0, &addDoubles);
    if (average == 2) return reduce(t, &minDoubles);
    if (average == 3) return reduce(t, &maxDoubles);
    return reduce(t, &addDoubles) / n;
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  uint32_t tag_ = 1u << 28;
};

std::shared_ptr<gloo::Context> connectMesh(gloo::rendezvous::Store& base, const std::string& prefix,
                                           const std::shared_ptr<gloo::transport::Device>& dev, int rank,
                                           int size) {
  gloo::rendezvous::PrefixStore store(prefix, base);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(std::chrono::seconds(600));
  ctx->connectFullMesh(store, const_cast<std::shared_ptr<gloo::transport::Device>&>(dev));
  return ctx;
}

// Values: exact small integers in float.
float reduceInput(int r, size_t i) { return float((r + 1) * int(i % 7 + 1)); }
float reduceResult(int n, size_t i) { return float(n * (n + 1) / 2) * float(i % 7 + 1); }
float moved(int src, int dst, size_t i) { return float((size_t(src) * 31 + size_t(dst + 1) * 7 + i) % 1021); }

// One collective (one algorithm for allreduce) at one size, set up outside the timing.
struct Op {
  std::function<void()> call;
  std::function<void()> fill;           // inputs, and sentinel in what the call writes
  std::function<size_t()> countWrong;   // after one call on filled buffers
  // Keep-alives for the option objects / algorithm instances the call uses.
  std::shared_ptr<void> state;
};

struct Shape {
  size_t send, recv, param;  // elements in this rank's send / receive buffers, count argument
};

Shape shapeOf(const std::string& coll, size_t count, int n) {
  const size_t per = count / size_t(n);
  if (coll == "allgather" || coll == "gather") return {per, per * n, per};
  if (coll == "reduce_scatter" || coll == "scatter") return {per * n, per, per};
  if (coll == "alltoall") return {per * n, per * n, per};
  return {count, count, count};
}

double busFactor(const std::string& coll, int n) {
  if (coll == "allreduce") return n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (coll == "broadcast" || coll == "reduce" || coll == "sendrecv") return 1.0;
  return double(n - 1) / n;
}

const char* busText(const std::string& coll) {
  if (coll == "allreduce") return "2(n-1)/n";
  if (coll == "broadcast" || coll == "reduce" || coll == "sendrecv") return "1";
  return "(n-1)/n";
}

template <class F>
size_t countIf(size_t n, F bad) {
  size_t w = 0;
  for (size_t i = 0; i < n; i++) w += bad(i) ? 1 : 0;
  return w;
}

// Builds the operation `coll` (algorithm `alg` for allreduce) on `ctx` for `sh`, using
// buffers `s` (send) and `r` (receive); tag distinguishes sizes.
Op makeOp(const std::string& coll, const std::string& alg, const std::shared_ptr<gloo::Context>& ctx, float* s,
          float* r, Shape sh, int root, uint32_t tag) {
  const int rank = ctx->rank, n = ctx->size;
  const size_t per = sh.param;
  const float sentinel = -12345.0f;
  Op op;
  auto fillSentinel = [r, sh, sentinel]() { std::fill(r, r + sh.recv, sentinel); };

  if (coll == "allreduce" && alg.compare(0, 4, "new_") != 0) {
    std::vector<float*> ptrs{s};
    std::shared_ptr<gloo::Algorithm> a;
    const int cnt = int(sh.param);
    if (alg == "ring") a = std::make_shared<gloo::AllreduceRing<float>>(ctx, ptrs, cnt);
    else if (alg == "ring_chunked") a = std::make_shared<gloo::AllreduceRingChunked<float>>(ctx, ptrs, cnt);
    else if (alg == "halving_doubling") a = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, cnt);
    else if (alg == "bcube") a = std::make_shared<gloo::AllreduceBcube<float>>(ctx, ptrs, cnt);
    else throw std::runtime_error("unknown allreduce algorithm " + alg);
    gloo::Algorithm* ap = a.get();
    op.state = a;
    op.call = [ap]() { ap->run(); };
    op.fill = [s, sh, rank]() { for (size_t i = 0; i < sh.send; i++) s[i] = reduceInput(rank, i); };
    op.countWrong = [s, sh, n]() { return countIf(sh.recv, [&](size_t i) { return s[i] != reduceResult(n, i); }); };
  } else if (coll == "allreduce") {
    auto o = std::make_shared<gloo::AllreduceOptions>(ctx);
    o->setAlgorithm(alg == "new_bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                       : gloo::AllreduceOptions::Algorithm::RING);
    o->setInput(s, sh.send);
    o->setOutput(r, sh.recv);
    o->setReduceFunction(&addFloats);
    o->setTag(tag);
    gloo::AllreduceOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::allreduce(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = reduceInput(rank, i); fillSentinel(); };
    op.countWrong = [r, sh, n]() { return countIf(sh.recv, [&](size_t i) { return r[i] != reduceResult(n, i); }); };
  } else if (coll == "broadcast") {
    auto o = std::make_shared<gloo::BroadcastOptions>(ctx);
    if (rank == root) o->setInput(s, sh.send);
    o->setOutput(r, sh.recv);
    o->setRoot(root);
    o->setTag(tag);
    gloo::BroadcastOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::broadcast(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = moved(rank, -1, i); fillSentinel(); };
    op.countWrong = [r, sh, root]() { return countIf(sh.recv, [&](size_t i) { return r[i] != moved(root, -1, i); }); };
  } else if (coll == "reduce") {
    auto o = std::make_shared<gloo::ReduceOptions>(ctx);
    o->setInput(s, sh.send);
    o->setOutput(r, sh.recv);
    o->setRoot(root);
    o->setReduceFunction(&addFloats);
    o->setTag(tag);
    gloo::ReduceOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::reduce(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = reduceInput(rank, i); fillSentinel(); };
    op.countWrong = [=]() {
      return rank != root ? size_t(0) : countIf(sh.recv, [&](size_t i) { return r[i] != reduceResult(n, i); });
    };
  } else if (coll == "allgather") {
    auto o = std::make_shared<gloo::AllgatherOptions>(ctx);
    o->setInput(s, sh.send);
    o->setOutput(r, sh.recv);
    o->setTag(tag);
    gloo::AllgatherOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::allgather(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = moved(rank, -1, i); fillSentinel(); };
    op.countWrong = [=]() {
      return countIf(sh.recv, [&](size_t i) { return r[i] != moved(int(i / per), -1, i % per); });
    };
  } else if (coll == "reduce_scatter") {
    std::vector<float*> ptrs{s};
    auto a = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(ctx, ptrs, int(sh.send),
                                                                         std::vector<int>(size_t(n), int(per)));
    gloo::Algorithm* ap = a.get();
    op.state = a;
    op.call = [ap]() { ap->run(); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = reduceInput(rank, i); };
    op.countWrong = [=]() {
      return countIf(per, [&](size_t i) { return s[i] != reduceResult(n, size_t(rank) * per + i); });
    };
  } else if (coll == "alltoall") {
    auto o = std::make_shared<gloo::AlltoallOptions>(ctx);
    o->setInput(s, sh.send);
    o->setOutput(r, sh.recv);
    o->setTag(tag);
    gloo::AlltoallOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::alltoall(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = moved(rank, int(i / per), i % per); fillSentinel(); };
    op.countWrong = [=]() {
      return countIf(sh.recv, [&](size_t i) { return r[i] != moved(int(i / per), rank, i % per); });
    };
  } else if (coll == "gather") {
    auto o = std::make_shared<gloo::GatherOptions>(ctx);
    o->setInput(s, sh.send);
    if (rank == root) o->setOutput(r, sh.recv);
    o->setRoot(root);
    o->setTag(tag);
    gloo::GatherOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::gather(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = moved(rank, -1, i); fillSentinel(); };
    op.countWrong = [=]() {
      if (rank != root) return size_t(0);
      return countIf(sh.recv, [&](size_t i) { return r[i] != moved(int(i / per), -1, i % per); });
    };
  } else if (coll == "scatter") {
    auto o = std::make_shared<gloo::ScatterOptions>(ctx);
    if (rank == root) {
      std::vector<float*> blocks;
      for (int d = 0; d < n; d++) blocks.push_back(s + size_t(d) * per);
      o->setInputs(blocks, per);
    }
    o->setOutput(r, sh.recv);
    o->setRoot(root);
    o->setTag(tag);
    gloo::ScatterOptions* p = o.get();
    op.state = o;
    op.call = [p]() { gloo::scatter(*p); };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = moved(rank, int(i / per), i % per); fillSentinel(); };
    op.countWrong = [=]() { return countIf(sh.recv, [&](size_t i) { return r[i] != moved(root, rank, i); }); };
  } else if (coll == "sendrecv") {
    struct Bufs {
      std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
    };
    auto b = std::make_shared<Bufs>();
    b->out = ctx->createUnboundBuffer(s, sh.send * sizeof(float));
    b->in = ctx->createUnboundBuffer(r, sh.recv * sizeof(float));
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    const uint64_t slot = (uint64_t(0x5e) << 56) | tag;
    Bufs* bp = b.get();
    op.state = b;
    op.call = [bp, right, left, slot]() {
      bp->in->recv(left, slot);
      bp->out->send(right, slot);
      bp->in->waitRecv();
      bp->out->waitSend();
    };
    op.fill = [=]() { for (size_t i = 0; i < sh.send; i++) s[i] = moved(rank, -1, i); fillSentinel(); };
    op.countWrong = [=]() { return countIf(sh.recv, [&](size_t i) { return r[i] != moved(left, -1, i); }); };
  } else {
    throw std::runtime_error("unknown collective " + coll);
  }
  return op;
}

int runRank(const Config& cfg, int rank, int size, const std::string& storeDir) {
  gloo::transport::tcp::attr attr;
  attr.hostname = cfg.host;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(storeDir);
  Stats stats(connectMesh(store, "stats", dev, rank, size));

  const size_t maxCount = std::max<size_t>(cfg.maxBytes / sizeof(float), 1);
  const size_t bufBytes = (maxCount * sizeof(float) + 4095) / 4096 * 4096;
  auto* sbuf = static_cast<float*>(aligned_alloc(4096, bufBytes));
  auto* rbuf = static_cast<float*>(aligned_alloc(4096, bufBytes));
  if (!sbuf || !rbuf) throw std::runtime_error("cannot allocate buffers");
  memset(sbuf, 0, bufBytes);
  memset(rbuf, 0, bufBytes);

  if (rank == 0) {
    printf("# gloo_coll_perf: %d ranks, TCP on %s, float, warmup %d, iters %d, check %d, average %d, prime %d\n",
           size, cfg.host.c_str(), cfg.warmup, cfg.iters, cfg.check, cfg.average, cfg.prime);
    printf("# library: Gloo %d.%d.%d (Debian libgloo-dev)\n", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR,
           GLOO_VERSION_PATCH);
    printf("# time = mean per call (combined over ranks per -a); algbw = size/time; GB = 1e9 B\n");
    fflush(stdout);
  }

  std::vector<std::string> colls;
  for (const std::string& c : splitList(cfg.colls)) {
    if (c == "all") {
      colls.assign(std::begin(kColls), std::end(kColls));
    } else if (std::find(std::begin(kColls), std::end(kColls), c) != std::end(kColls)) {
      colls.push_back(c);
    } else {
      throw std::runtime_error("unknown collective " + c);
    }
  }

  long long failedRows = 0;
  int ctxIdx = 0;
  for (const std::string& coll : colls) {
    const bool hasRoot = coll == "broadcast" || coll == "reduce" || coll == "gather" || coll == "scatter";
    const bool hasOp = coll == "allreduce" || coll == "reduce" || coll == "reduce_scatter";
    std::vector<std::string> algs{"-"};
    if (coll == "allreduce") algs = splitList(cfg.algs);
    for (const std::string& alg : algs) {
      ++ctxIdx;
      auto ctx = connectMesh(store, "coll" + std::to_string(ctxIdx), dev, rank, size);
      const uint32_t tagBase = 4096u * uint32_t(ctxIdx);
      if (cfg.prime) {
        Shape sh = shapeOf(coll, maxCount, size);
        if (sh.param > 0) {
          Op op = makeOp(coll, alg, ctx, sbuf, rbuf, sh, cfg.root, tagBase + 4095u);
          op.fill();
          op.call();
        }
      }
      if (rank == 0) {
        printf("#\n# collective: %s (Gloo%s%s), busbw = algbw * %s\n", coll.c_str(), alg == "-" ? "" : ", ",
               alg == "-" ? "" : alg.c_str(), busText(coll));
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s %6s %8s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong", "iters", "p50");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s %6s %8s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "", "", "(us)");
        fflush(stdout);
      }
      double busSum = 0;
      int rows = 0;
      size_t lastParam = ~size_t(0);
      uint32_t sizeIdx = 0;
      for (size_t bytes = cfg.minBytes; bytes <= cfg.maxBytes; bytes *= size_t(cfg.factor)) {
        Shape sh = shapeOf(coll, bytes / sizeof(float), size);
        if (sh.param == 0 || sh.param == lastParam) continue;
        lastParam = sh.param;
        const size_t rowBytes = std::max(sh.send, sh.recv) * sizeof(float);
        int nIt = cfg.iters, nWu = cfg.warmup;
        if (cfg.scaleAbove && rowBytes > cfg.scaleAbove) {
          nIt = std::max(cfg.minIters, int(double(cfg.iters) * double(cfg.scaleAbove) / double(rowBytes)));
          nWu = std::max(1, int(double(cfg.warmup) * double(cfg.scaleAbove) / double(rowBytes)));
        }
        Op op = makeOp(coll, alg, ctx, sbuf, rbuf, sh, cfg.root, tagBase + sizeIdx++);
        op.fill();
        for (int w = 0; w < nWu; w++) op.call();
        std::vector<double> each(static_cast<size_t>(nIt));
        stats.barrier();
        const double t0 = seconds();
        for (int it = 0; it < nIt; it++) {
          const double a = seconds();
          op.call();
          each[size_t(it)] = seconds() - a;
        }
        const double mine = (seconds() - t0) / nIt;
        std::sort(each.begin(), each.end());
        const double p50 = stats.reduce(each[each.size() / 2], &maxDoubles);
        const double t = stats.combineTime(mine, cfg.average);

        double wrong = -1;
        if (cfg.check) {
          // Every rank's timed calls end before any rank refills its buffers and starts
          // the checked call: a rank still in its last timed call must not meet the
          // checked call's messages or inputs.
          stats.barrier();
          op.fill();
          stats.barrier();
          op.call();
          wrong = stats.reduce(double(op.countWrong()), &addDoubles);
          if (wrong > 0) failedRows++;
        }
        if (rank == 0) {
          const double algbw = double(rowBytes) / t / 1e9, busbw = algbw * busFactor(coll, size);
          const double us = t * 1e6;
          char w[32];
          if (wrong < 0) snprintf(w, sizeof w, "N/A");
          else snprintf(w, sizeof w, "%.0f", wrong);
          busSum += busbw;
          rows++;
          printf("%12zu  %12zu  %8s  %6s  %6d  %7.*f  %6.2f  %6.2f  %5s %6d %8.1f\n", rowBytes, sh.param, "float",
                 hasOp ? "sum" : "none", hasRoot ? cfg.root : -1, us >= 10000 ? 0 : us >= 100 ? 1 : 2, us, algbw,
                 busbw, w, nIt, p50 * 1e6);
          fflush(stdout);
        }
      }
      if (rank == 0)
        printf("# Avg bus bandwidth (%s%s%s): %g over %d sizes\n", coll.c_str(), alg == "-" ? "" : " ",
               alg == "-" ? "" : alg.c_str(), rows ? busSum / rows : 0.0, rows);
    }
  }
  stats.barrier();
  if (rank == 0) {
    printf("# Out of bounds values : %s\n", failedRows ? "FAILED" : "OK");
    fflush(stdout);
  }
  free(sbuf);
  free(rbuf);
  return failedRows ? 1 : 0;
}

void removeStore(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir.c_str());
}

int runGuarded(const Config& cfg, int rank, int size, const std::string& dir) {
  try {
    return runRank(cfg, rank, size, dir);
  } catch (const std::exception& ex) {
    fprintf(stderr, "gloo_coll_perf rank %d: %s\n", rank, ex.what());
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  int ch;
  while ((ch = getopt(argc, argv, "N:b:e:f:w:n:S:m:c:a:r:C:A:H:P:h")) != -1) {
    switch (ch) {
      case 'N': cfg.nprocs = atoi(optarg); break;
      case 'b': cfg.minBytes = parseBytes(optarg); break;
      case 'e': cfg.maxBytes = parseBytes(optarg); break;
      case 'f': cfg.factor = atoi(optarg); break;
      case 'w': cfg.warmup = atoi(optarg); break;
      case 'n': cfg.iters = atoi(optarg); break;
      case 'S': cfg.scaleAbove = parseBytes(optarg); break;
      case 'm': cfg.minIters = atoi(optarg); break;
      case 'c': cfg.check = atoi(optarg); break;
      case 'a': cfg.average = atoi(optarg); break;
      case 'r': cfg.root = atoi(optarg); break;
      case 'C': cfg.colls = optarg; break;
      case 'A': cfg.algs = optarg; break;
      case 'H': cfg.host = optarg; break;
      case 'P': cfg.prime = atoi(optarg); break;
      default:
        fprintf(stderr,
                "usage: %s [-N ranks] [-C coll,...|all] [-A allreduce_alg,...] [-b min] [-e max] [-f factor]\n"
                "          [-w warmup] [-n iters] [-S scale_above] [-m min_iters] [-c check] [-a 0|1|2|3]\n"
                "          [-r root] [-H host] [-P prime]\n"
                "  or RANK=r SIZE=n GLOO_STORE_DIR=dir %s [opts]\n"
                "collectives: allreduce broadcast reduce allgather reduce_scatter alltoall gather scatter sendrecv\n"
                "allreduce algorithms: ring_chunked halving_doubling ring bcube new_ring new_bcube\n",
                argv[0], argv[0]);
        return 2;
    }
  }
  if (cfg.factor < 2) cfg.factor = 2;
  if (cfg.minBytes < sizeof(float)) cfg.minBytes = sizeof(float);
  if (cfg.iters < 1) cfg.iters = 1;

  const char* er = getenv("RANK");
  const char* es = getenv("SIZE");
  const char* ed = getenv("GLOO_STORE_DIR");
  if (er && es && ed) {
    if (cfg.root < 0 || cfg.root >= atoi(es)) { fprintf(stderr, "root out of range\n"); return 2; }
    return runGuarded(cfg, atoi(er), atoi(es), ed);
  }
  if (cfg.nprocs < 1 || cfg.root < 0 || cfg.root >= cfg.nprocs) {
    fprintf(stderr, "%s: need -N >= 1 and 0 <= -r < N\n", argv[0]);
    return 2;
  }
  if (cfg.nprocs < 2 && cfg.colls.find("sendrecv") != std::string::npos) {
    fprintf(stderr, "%s: sendrecv needs at least 2 ranks\n", argv[0]);
    return 2;
  }

  char tmpl[] = "/tmp/gloo_coll_store.XXXXXX";
  if (!mkdtemp(tmpl)) {
    perror("mkdtemp");
    return 1;
  }
  const std::string dir(tmpl);
  fflush(stdout);
  std::vector<pid_t> kids;
  const pid_t parent = getpid();
  for (int r = 0; r < cfg.nprocs; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      // A rank outlives a killed parent (e.g. a timeout) only until Gloo's own timeout; end it now.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(4);
      int rc = runGuarded(cfg, r, cfg.nprocs, dir);
      fflush(stdout);
      _exit(rc);
    }
    kids.push_back(pid);
  }
  int bad = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  removeStore(dir);
  if (bad) fprintf(stderr, "gloo_coll_perf: %d rank(s) failed\n", bad);
  return bad ? 1 : 0;
}
