/*
 * ccl_coll_perf.cc - Intel's oneCCL collectives timed the way braid's *_perf tools time
 * braid's, with mpi_coll_perf.c's options, table and check (coll_data.h).
 *
 *   mpiexec.hydra -n 2 -genv I_MPI_FABRICS shm ccl_coll_perf -C allreduce -b 64K -e 256M -f 4
 *   mpiexec.hydra -n 2 -genv I_MPI_FABRICS ofi -genv FI_PROVIDER tcp -genv FI_TCP_IFACE lo ...
 *
 * oneCCL and Intel MPI come from PyPI (oneccl-devel pulls oneccl and impi-rt); oneCCL's
 * default transport on the CPU is Intel MPI, so the ranks are started by Intel MPI's
 * launcher (hydra), which gives each its rank in PMI_RANK and PMI_SIZE, and I_MPI_FABRICS
 * picks shared memory or tcp. Rank 0 makes oneCCL's key-value store and passes its address
 * to the others through a file (-k, default /tmp/ccl_coll_perf.<uid>.<launcher pid>: the
 * ranks of one host share the launcher's proxy as their parent).
 *
 * Collectives (-C, a comma list or "all"; no gather, scatter or sendrecv: has() says why):
 *   allreduce       ccl::allreduce              busbw = algbw * 2(n-1)/n
 *   broadcast       ccl::broadcast (one buffer, as MPI_Bcast)   busbw = algbw
 *   reduce          ccl::reduce                 busbw = algbw
 *   allgather       ccl::allgather              busbw = algbw * (n-1)/n
 *   reduce_scatter  ccl::reduce_scatter         busbw = algbw * (n-1)/n
 *   alltoall        ccl::alltoall               busbw = algbw * (n-1)/n
 *
 * Sizes, columns, time combining (-a) and the check (-c) are mpi_coll_perf.c's: 1 size (B),
 * 2 count, 3 type, 4 redop, 5 root, 6 time (us), 7 algbw (GB/s), 8 busbw (GB/s), 9 #wrong,
 * 10 iters; out of place only; time is each rank's mean per call after a barrier.
 *
 * Options: -b min bytes (1M), -e max bytes (256M), -f factor (2), -w warmup (5),
 *   -n iters (20), -S B: above B scale iterations by B/size (0 = never), -m min iters when
 *   scaling (3), -c 0|1 check (1), -a 0..3 (1), -r root (0), -C collectives (allreduce),
 *   -k file for the store's address.
 */
#include <oneapi/ccl.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "coll_data.h"

namespace {

int rank = 0, nranks = 1;

// One call of collective c, waited for (has(c) only).
void run_once(int c, const float* s, float* r, Counts k, int root, const ccl::communicator& comm) {
  const size_t cnt = k.param;
  switch (c) {
    case ALLREDUCE: ccl::allreduce(s, r, cnt, ccl::reduction::sum, comm).wait(); break;
    case BROADCAST:
      // One buffer, as MPI_Bcast: the root sends from its input, the others receive into
      // their receive buffers.
      ccl::broadcast(rank == root ? const_cast<float*>(s) : r, cnt, root, comm).wait();
      break;
    case REDUCE: ccl::reduce(s, r, cnt, ccl::reduction::sum, root, comm).wait(); break;
    case ALLGATHER: ccl::allgather(s, r, cnt, comm).wait(); break;
    case REDUCE_SCATTER: ccl::reduce_scatter(s, r, cnt, ccl::reduction::sum, comm).wait(); break;
    case ALLTOALL: ccl::alltoall(s, r, cnt, comm).wait(); break;
    default: break;
  }
}

// oneCCL has no gather or scatter; its send and recv (2022.1) crash on host buffers, with
// or without a host stream (ccl_stream::get_ze_device, a Level Zero device it does not
// have), so no sendrecv either.
bool has(int c) { return c != GATHER && c != SCATTER && c != SENDRECV; }

double combine(double t, int average, const ccl::communicator& comm) {
  double in = t, out = 0;
  if (average == 0 || nranks == 1) {
    out = t;
    ccl::broadcast(&out, 1, 0, comm).wait();
    return out;
  }
  ccl::reduction op = average == 2 ? ccl::reduction::min : average == 3 ? ccl::reduction::max : ccl::reduction::sum;
  ccl::allreduce(&in, &out, 1, op, comm).wait();
  return average == 1 ? out / nranks : out;
}

float* alloc_touched(size_t bytes) {
  void* p = nullptr;
  size_t rounded = ((bytes ? bytes : 1) + 4095) / 4096 * 4096;
  if (posix_memalign(&p, 4096, rounded)) return nullptr;
  std::memset(p, 0, rounded);
  return static_cast<float*>(p);
}

int env_int(const char* a, const char* b, int dflt) {
  const char* v = std::getenv(a);
  if (!v && b) v = std::getenv(b);
  return v ? std::atoi(v) : dflt;
}

}  // namespace

int main(int argc, char** argv) {
  size_t minb = 1u << 20, maxb = static_cast<size_t>(256) << 20, scale_above = 0;
  int factor = 2, warmup = 5, iters = 20, min_iters = 3, check = 1, average = 1, root = 0, opt;
  const char* colls = "allreduce";
  std::string kvs_file;

  rank = env_int("PMI_RANK", "OMPI_COMM_WORLD_RANK", -1);
  nranks = env_int("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", -1);
  if (rank < 0 || nranks < 1 || rank >= nranks) {
    std::fprintf(stderr, "%s: no rank: start it with Intel MPI's mpiexec.hydra (PMI_RANK, PMI_SIZE)\n", argv[0]);
    return 2;
  }
  while ((opt = getopt(argc, argv, "b:e:f:w:n:S:m:c:a:r:C:k:h")) != -1) {
    switch (opt) {
      case 'b': minb = coll_parse_size(optarg); break;
      case 'e': maxb = coll_parse_size(optarg); break;
      case 'f': factor = std::atoi(optarg); break;
      case 'w': warmup = std::atoi(optarg); break;
      case 'n': iters = std::atoi(optarg); break;
      case 'S': scale_above = coll_parse_size(optarg); break;
      case 'm': min_iters = std::atoi(optarg); break;
      case 'c': check = std::atoi(optarg); break;
      case 'a': average = std::atoi(optarg); break;
      case 'r': root = std::atoi(optarg); break;
      case 'C': colls = optarg; break;
      case 'k': kvs_file = optarg; break;
      default:
        if (rank == 0)
          std::fprintf(stderr,
                       "usage: %s [-C coll,...|all] [-b min] [-e max] [-f factor] [-w warmup] [-n iters]\n"
                       "          [-S scale_above] [-m min_iters] [-c check] [-a 0|1|2|3] [-r root] [-k file]\n",
                       argv[0]);
        return 2;
    }
  }
  if (factor < 2) factor = 2;
  if (minb < sizeof(float)) minb = sizeof(float);
  if (iters < 1) iters = 1;
  if (root < 0 || root >= nranks) {
    if (rank == 0) std::fprintf(stderr, "%s: root %d out of range for %d ranks\n", argv[0], root, nranks);
    return 2;
  }
  int want[NCOLL] = {0};
  {
    std::string list = colls;
    size_t at = 0;
    while (at <= list.size()) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      const std::string t = list.substr(at, end - at);
      at = end + 1;
      bool found = false;
      for (int c = 0; c < NCOLL; c++)
        if ((t == "all" && has(c)) || t == kCollNames[c]) want[c] = found = true;
      if (!found) {
        if (rank == 0) std::fprintf(stderr, "%s: unknown collective '%s'\n", argv[0], t.c_str());
        return 2;
      }
    }
  }
  for (int c = 0; c < NCOLL; c++)
    if (want[c] && !has(c)) {
      if (rank == 0) std::fprintf(stderr, "%s: oneCCL has no %s\n", argv[0], kCollNames[c]);
      return 2;
    }
  if (kvs_file.empty())
    kvs_file = "/tmp/ccl_coll_perf." + std::to_string(getuid()) + "." + std::to_string(getppid());

  ccl::init();
  ccl::shared_ptr_class<ccl::kvs> kvs;
  if (rank == 0) {
    kvs = ccl::create_main_kvs();
    const ccl::kvs::address_type addr = kvs->get_address();
    const std::string tmp = kvs_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(addr.data()), addr.size());
    if (std::rename(tmp.c_str(), kvs_file.c_str()) != 0) {
      std::fprintf(stderr, "rank 0: cannot write %s: %s\n", kvs_file.c_str(), std::strerror(errno));
      return 2;
    }
  } else {
    ccl::kvs::address_type addr;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      std::ifstream f(kvs_file, std::ios::binary);
      if (f && f.read(reinterpret_cast<char*>(addr.data()), addr.size())) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "rank %d: no store address in %s after 60 s\n", rank, kvs_file.c_str());
        return 2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    kvs = ccl::create_kvs(addr);
  }
  ccl::communicator comm = ccl::create_communicator(nranks, rank, kvs);
  ccl::barrier(comm).wait();
  if (rank == 0) std::remove(kvs_file.c_str());

  // Buffers big enough for any collective at maxb: at most maxb/4 elements each side.
  const size_t maxcount = maxb / sizeof(float);
  float* sbuf = alloc_touched(maxcount * sizeof(float));
  float* rbuf = alloc_touched(maxcount * sizeof(float));
  if (!sbuf || !rbuf) {
    std::fprintf(stderr, "rank %d: cannot allocate 2 x %zu B\n", rank, maxcount * sizeof(float));
    return 2;
  }

  if (rank == 0) {
    const ccl::library_version v = ccl::get_library_version();
    std::printf("# ccl_coll_perf: %d ranks, out-of-place, float, warmup %d, iters %d, check %d, average %d\n", nranks,
                warmup, iters, check, average);
    std::printf("# library: oneCCL %s\n", v.full ? v.full : "?");
    std::printf("# time = mean per call (combined over ranks per -a); algbw = size/time; GB = 1e9 B\n");
    std::fflush(stdout);
  }

  int failed = 0;
  for (int c = 0; c < NCOLL; c++) {
    if (!want[c]) continue;
    if (rank == 0) coll_print_head(c, "oneCCL");
    double bus_sum = 0;
    int nsizes = 0;
    size_t last_param = static_cast<size_t>(-1);
    for (size_t bytes = minb; bytes <= maxb; bytes *= static_cast<size_t>(factor)) {
      const Counts k = coll_counts(c, bytes / sizeof(float), nranks);
      if (k.param == 0 || k.param == last_param) continue;
      last_param = k.param;
      const size_t size = (k.send > k.recv ? k.send : k.recv) * sizeof(float);
      int n_it = iters, n_wu = warmup;
      if (scale_above && size > scale_above) {
        n_it = static_cast<int>(static_cast<double>(iters) * scale_above / size);
        n_wu = static_cast<int>(static_cast<double>(warmup) * scale_above / size);
        if (n_it < min_iters) n_it = min_iters;
        if (n_wu < 1) n_wu = 1;
      }

      coll_fill_input(c, sbuf, k, rank, nranks);
      for (int w = 0; w < n_wu; w++) run_once(c, sbuf, rbuf, k, root, comm);
      ccl::barrier(comm).wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < n_it; it++) run_once(c, sbuf, rbuf, k, root, comm);
      const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n_it;
      const double dt = combine(mine, average, comm);

      long long wrong = -1;
      if (check) {
        coll_fill_input(c, sbuf, k, rank, nranks);
        for (size_t i = 0; i < k.recv; i++) rbuf[i] = -12345.0f;
        run_once(c, sbuf, rbuf, k, root, comm);
        int64_t bad = coll_check_output(c, rbuf, k, root, rank, nranks, 0), all = 0;
        ccl::allreduce(&bad, &all, 1, ccl::reduction::sum, comm).wait();
        wrong = all;
        if (wrong) failed = 1;
      }
      if (rank == 0) {
        bus_sum += coll_print_row(c, size, k.param, root, dt, wrong, n_it, nranks);
        nsizes++;
      }
    }
    if (rank == 0)
      std::printf("# Avg bus bandwidth (%s): %g over %d sizes\n", kCollNames[c], nsizes ? bus_sum / nsizes : 0.0,
                  nsizes);
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %s\n", failed ? "FAILED" : "OK");
    std::fflush(stdout);
  }
  std::free(sbuf);
  std::free(rbuf);
  return failed ? 1 : 0;
}
