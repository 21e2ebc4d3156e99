// nccl_coll_perf.cc - NCCL's collectives on device buffers, timed the way braid's *_perf
// tools time braid's with -D 1, so that scripts/gpu_checks.sh compares the two in one run.
//
//   braidrun -np 2 nccl_coll_perf -C allreduce -b 8 -e 128M -f 8
//   braidrun -np 2 nccl_coll_perf --host-per-rank -C allreduce    # 2 ranks on one GPU (below)
//
// The ranks start like braid's tools (braidrun, or mpirun with braid's environment) and use
// braid's C API on host memory only to meet: rank 0's ncclUniqueId is broadcast with
// braidBroadcast, times and wrong-element counts are combined with braidAllReduce. Rank r
// takes GPU (local rank % visible GPUs), as the tools' -D 1 does, and NCCL does all the rest.
//
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"). --host-per-rank gives every
// rank a host id of its own (NCCL_HOSTID) before NCCL starts, so that NCCL treats the ranks
// as hosts of their own and runs them through its network path (sockets here): the same
// configuration as braid's ranks sharing a GPU across emulated hosts (BRAID_TRANSPORT=tcp).
//
// Collectives (-C, a comma list or "all"), sizes, bus-bandwidth factors, data and checks are
// coll_data.h's, shared with mpi_coll_perf.c (nccl-tests' definitions), and so is the table:
// columns 1 size (B), 2 count, 3 type, 4 redop, 5 root, 6 time (us), 7 algbw (GB/s), 8 busbw
// (GB/s), 9 #wrong, 10 iters. Only out of place, float, sum. alltoall, gather and scatter are
// NCCL's own calls from NCCL 2.28 and grouped ncclSend/ncclRecv before it (or with
// -DNCCL_COLL_PERF_GROUPED).
//
// time: the timed loop's calls are enqueued on one stream, which is then synchronized; each
// rank's mean per call, combined over ranks as -a says (0 rank 0's, 1 mean, 2 min, 3 max).
//
// Exits 77, saying why, where no GPU is usable (a CTest run reports it as skipped), 2 on bad
// arguments, 1 when NCCL fails or an element is wrong.

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "coll_data.h"

namespace {

constexpr int kExitSkip = 77;

int rank = 0, nranks = 1;
braidComm_t comm = nullptr;

// Rank 0 says it once for everybody; the others say it only when it is theirs alone.
[[noreturn]] void die(int code, bool everyRank, const char* fmt, ...) {
  if (everyRank || rank == 0) {
    // Before the ranks have met, none knows its rank.
    if (comm) std::fprintf(stderr, "nccl_coll_perf: rank %d: ", rank);
    else std::fprintf(stderr, "nccl_coll_perf: ");
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);
  }
  // Bad arguments are every rank's alike; a failure of this rank's own is told to the others,
  // whose next braid call then fails rather than waits for this one.
  if (comm) code == 2 ? braidCommDestroy(comm) : braidCommAbort(comm);
  std::exit(code);
}

void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(1, true, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}
void ncclCheck(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(1, true, "%s: %s (NCCL_DEBUG=WARN says more)", what, ncclGetErrorString(r));
}
void braidCheck(braidResult_t r, const char* what) {
  if (r != braidSuccess) die(1, true, "%s: %s: %s", what, braidGetErrorString(r), braidGetLastError(comm));
}

// Enqueues one call on `stream`.
ncclResult_t enqueue(int c, const float* s, float* r, const Counts& k, int root, ncclComm_t nc, cudaStream_t stream) {
  const size_t n = k.param;
  const int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
  switch (c) {
    case ALLREDUCE: return ncclAllReduce(s, r, n, ncclFloat32, ncclSum, nc, stream);
    case BROADCAST: return ncclBroadcast(s, r, n, ncclFloat32, root, nc, stream);
    case REDUCE: return ncclReduce(s, r, n, ncclFloat32, ncclSum, root, nc, stream);
    case ALLGATHER: return ncclAllGather(s, r, n, ncclFloat32, nc, stream);
    case REDUCE_SCATTER: return ncclReduceScatter(s, r, n, ncclFloat32, ncclSum, nc, stream);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && !defined(NCCL_COLL_PERF_GROUPED)
    case ALLTOALL: return ncclAlltoAll(s, r, n, ncclFloat32, nc, stream);
    case GATHER: return ncclGather(s, r, n, ncclFloat32, root, nc, stream);
    case SCATTER: return ncclScatter(s, r, n, ncclFloat32, root, nc, stream);
#else
    case ALLTOALL: case GATHER: case SCATTER: {
      ncclResult_t st = ncclGroupStart();
      auto sendTo = [&](int peer, const float* from) {
        if (st == ncclSuccess) st = ncclSend(from, n, ncclFloat32, peer, nc, stream);
      };
      auto recvFrom = [&](int peer, float* into) {
        if (st == ncclSuccess) st = ncclRecv(into, n, ncclFloat32, peer, nc, stream);
      };
      if (c == ALLTOALL) {
        for (int p = 0; p < nranks; p++) sendTo(p, s + p * n);
        for (int p = 0; p < nranks; p++) recvFrom(p, r + p * n);
      } else if (c == GATHER) {
        sendTo(root, s);
        if (rank == root)
          for (int p = 0; p < nranks; p++) recvFrom(p, r + p * n);
      } else {
        if (rank == root)
          for (int p = 0; p < nranks; p++) sendTo(p, s + p * n);
        recvFrom(root, r);
      }
      const ncclResult_t end = ncclGroupEnd();
      return st != ncclSuccess ? st : end;
    }
#endif
    case SENDRECV: {
      ncclResult_t st = ncclGroupStart();
      if (st == ncclSuccess) st = ncclSend(s, n, ncclFloat32, right, nc, stream);
      if (st == ncclSuccess) st = ncclRecv(r, n, ncclFloat32, left, nc, stream);
      const ncclResult_t end = ncclGroupEnd();
      return st != ncclSuccess ? st : end;
    }
  }
  return ncclInvalidArgument;
}

double combine(double t, int average) {
  double out = t;
  if (average == 0 || nranks == 1) {
    braidCheck(braidBroadcast(&t, &out, 1, braidFloat64, 0, comm, nullptr), "braidBroadcast of the time");
    return out;
  }
  const braidRedOp_t op = average == 2 ? braidMin : average == 3 ? braidMax : braidSum;
  braidCheck(braidAllReduce(&t, &out, 1, braidFloat64, op, comm, nullptr), "braidAllReduce of the time");
  return average == 1 ? out / nranks : out;
}

int localRankFromEnv() {
  for (const char* name : {"BRAID_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) return std::atoi(v);
  }
  return rank;
}

void usage(const char* argv0) {
  if (rank == 0)
    std::fprintf(stderr,
                 "usage: %s [-C coll,...|all] [-b min] [-e max] [-f factor] [-w warmup] [-n iters]\n"
                 "          [-c 0|1] [-a 0|1|2|3] [-r root] [--host-per-rank]\n"
                 "  under braidrun (or mpirun with braid's environment); device buffers, one GPU per\n"
                 "  rank by local rank; --host-per-rank: NCCL_HOSTID of each rank its own, so that ranks\n"
                 "  sharing a GPU run through NCCL's network path\n",
                 argv0);
}

}  // namespace

int main(int argc, char** argv) {
  size_t minb = size_t{1} << 20, maxb = size_t{256} << 20;
  int factor = 2, warmup = 5, iters = 20, check = 1, average = 1, root = 0;
  bool hostPerRank = false;
  const char* colls = "allreduce";

  // Every rank parses the same arguments; errors are reported once the ranks have met.
  std::string argError;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--host-per-rank") {
      hostPerRank = true;
      continue;
    }
    if (a.size() != 2 || a[0] != '-' || i + 1 >= argc || std::strchr("Cbefwncar", a[1]) == nullptr) {
      argError = a == "-h" || a == "--help" ? "help" : "unknown argument '" + a + "'";
      break;
    }
    const char* v = argv[++i];
    switch (a[1]) {
      case 'C': colls = v; break;
      case 'b': minb = coll_parse_size(v); break;
      case 'e': maxb = coll_parse_size(v); break;
      case 'f': factor = std::atoi(v); break;
      case 'w': warmup = std::atoi(v); break;
      case 'n': iters = std::atoi(v); break;
      case 'c': check = std::atoi(v); break;
      case 'a': average = std::atoi(v); break;
      case 'r': root = std::atoi(v); break;
      default: break;
    }
  }

  braidComm_t joined = nullptr;
  braidCheck(braidCommInitFromEnv(&joined), "braidCommInitFromEnv (start the ranks with braidrun)");
  comm = joined;
  braidCheck(braidCommUserRank(comm, &rank), "braidCommUserRank");
  braidCheck(braidCommCount(comm, &nranks), "braidCommCount");
  if (!argError.empty()) {
    if (argError != "help" && rank == 0) std::fprintf(stderr, "nccl_coll_perf: %s\n", argError.c_str());
    usage(argv[0]);
    braidCommDestroy(comm);
    return 2;
  }
  if (factor < 2 || iters < 1 || warmup < 0 || minb == 0 || minb > maxb || average < 0 || average > 3)
    die(2, false, "need -f >= 2, -n >= 1, -w >= 0, 0 < -b <= -e and -a 0..3");
  if (root < 0 || root >= nranks) die(2, false, "-r %d is not a rank of %d", root, nranks);
  if (minb < sizeof(float)) minb = sizeof(float);

  bool want[NCOLL] = {};
  {
    std::string list = colls;
    size_t at = 0;
    while (at <= list.size()) {
      const size_t end = std::min(list.find(',', at), list.size());
      const std::string name = list.substr(at, end - at);
      bool found = false;
      for (int c = 0; c < NCOLL; c++)
        if (name == "all" || name == kCollNames[c]) want[c] = found = true;
      if (!found) die(2, false, "unknown collective '%s' (-C)", name.c_str());
      at = end + 1;
    }
  }

  // Every rank finds out whether it has a GPU before any waits for NCCL: a rank without one
  // would leave the others in ncclCommInitRank.
  int ngpu = 0, gpu = -1;
  const cudaError_t ce = cudaGetDeviceCount(&ngpu);
  std::string noGpu;
  if (ce != cudaSuccess) noGpu = std::string(cudaGetErrorName(ce)) + " (" + cudaGetErrorString(ce) + ")";
  else if (ngpu == 0) noGpu = "no GPU is visible (CUDA_VISIBLE_DEVICES?)";
  long long lacking = noGpu.empty() ? 0 : 1, lackingAll = 0;
  braidCheck(braidAllReduce(&lacking, &lackingAll, 1, braidInt64, braidSum, comm, nullptr), "braidAllReduce");
  if (lackingAll > 0) {
    if (!noGpu.empty()) std::fprintf(stderr, "nccl_coll_perf: rank %d: no usable GPU: %s\n", rank, noGpu.c_str());
    braidCommDestroy(comm);
    return kExitSkip;
  }
  gpu = localRankFromEnv() % ngpu;
  cudaCheck(cudaSetDevice(gpu), "cudaSetDevice");

  if (hostPerRank) {
    // Read by NCCL when its communicator starts (its host hash): ranks of one machine then
    // count as hosts of their own.
    const std::string id = "nccl-coll-perf-" + std::to_string(getpid()) + "-rank-" + std::to_string(rank);
    setenv("NCCL_HOSTID", id.c_str(), 1);
  }
  ncclUniqueId uid{};
  if (rank == 0) ncclCheck(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  braidCheck(braidBroadcast(&uid, &uid, sizeof(uid), braidUint8, 0, comm, nullptr), "braidBroadcast of the NCCL id");
  ncclComm_t nc = nullptr;
  ncclCheck(ncclCommInitRank(&nc, nranks, uid, rank), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  // Buffers large enough for any collective at maxb: at most maxb/4 elements each side.
  const size_t maxCount = maxb / sizeof(float);
  float *sbuf = nullptr, *rbuf = nullptr;
  cudaCheck(cudaMalloc(&sbuf, std::max<size_t>(maxCount, 1) * sizeof(float)), "cudaMalloc (send buffer)");
  cudaCheck(cudaMalloc(&rbuf, std::max<size_t>(maxCount, 1) * sizeof(float)), "cudaMalloc (receive buffer)");
  std::vector<float> hs(maxCount), hr(maxCount);

  if (rank == 0) {
    int version = 0;
    ncclGetVersion(&version);
    cudaDeviceProp prop{};
    cudaCheck(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
    std::printf("# nccl_coll_perf: %d ranks on %d visible GPU(s), out-of-place, float, warmup %d, iters %d, check %d, "
                "average %d%s\n",
                nranks, ngpu, warmup, iters, check, average, hostPerRank ? ", a host id per rank" : "");
    std::printf("# library: NCCL %d.%d.%d; rank 0 on GPU %d: %s\n", version / 10000, version / 100 % 100,
                version % 100, gpu, prop.name);
    std::printf("# time = mean per call (combined over ranks per -a); algbw = size/time; GB = 1e9 B\n");
    std::fflush(stdout);
  }

  bool failed = false;
  for (int c = 0; c < NCOLL; c++) {
    if (!want[c]) continue;
    if (rank == 0) coll_print_head(c, "NCCL");
    double busSum = 0;
    int nsizes = 0;
    size_t lastParam = static_cast<size_t>(-1);
    for (size_t bytes = minb; bytes <= maxb; bytes *= static_cast<size_t>(factor)) {
      const Counts k = coll_counts(c, bytes / sizeof(float), nranks);
      if (k.param == 0 || k.param == lastParam) continue;
      lastParam = k.param;
      const size_t size = std::max(k.send, k.recv) * sizeof(float);

      coll_fill_input(c, hs.data(), k, rank, nranks);
      cudaCheck(cudaMemcpy(sbuf, hs.data(), k.send * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
      for (int w = 0; w < warmup; w++) ncclCheck(enqueue(c, sbuf, rbuf, k, root, nc, stream), kCollNames[c]);
      cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      braidCheck(braidBarrier(comm), "braidBarrier");
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < iters; it++) ncclCheck(enqueue(c, sbuf, rbuf, k, root, nc, stream), kCollNames[c]);
      cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      const double dt = combine(mine, average);

      long long wrong = -1;
      if (check) {
        coll_fill_input(c, hs.data(), k, rank, nranks);
        cudaCheck(cudaMemcpy(sbuf, hs.data(), k.send * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
        std::fill(hr.begin(), hr.begin() + k.recv, -12345.0f);
        cudaCheck(cudaMemcpy(rbuf, hr.data(), k.recv * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
        ncclCheck(enqueue(c, sbuf, rbuf, k, root, nc, stream), kCollNames[c]);
        cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        cudaCheck(cudaMemcpy(hr.data(), rbuf, k.recv * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
        long long bad = coll_check_output(c, hr.data(), k, root, rank, nranks, 1);
        braidCheck(braidAllReduce(&bad, &wrong, 1, braidInt64, braidSum, comm, nullptr), "braidAllReduce");
        if (wrong) failed = true;
      }
      if (rank == 0) {
        busSum += coll_print_row(c, size, k.param, root, dt, wrong, iters, nranks);
        nsizes++;
      }
    }
    if (rank == 0)
      std::printf("# Avg bus bandwidth (%s): %g over %d sizes\n", kCollNames[c], nsizes ? busSum / nsizes : 0.0, nsizes);
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %s\n", failed ? "FAILED" : "OK");
    std::fflush(stdout);
  }
  cudaFree(sbuf);
  cudaFree(rbuf);
  cudaStreamDestroy(stream);
  ncclCommDestroy(nc);
  braidCommDestroy(comm);
  return failed ? 1 : 0;
}
