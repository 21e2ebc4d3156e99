// gather_perf: bandwidth and latency of braidGather, with nccl-tests' flags and table.
//
//   braidrun -np 4 gather_perf -b 8 -e 256M -f 2 -r 0     (-r all: every root in turn)
//
// The size column is the root's whole receive buffer (nranks blocks), as in nccl-tests.

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int nranks) {
  CollCounts c;
  c.paramCount = count / static_cast<size_t>(nranks);
  c.sendCount = c.paramCount;
  c.recvCount = c.paramCount * static_cast<size_t>(nranks);
  c.sendInPlaceOffset = c.paramCount;  // in place: each rank's block of the receive buffer
  return c;
}

// The root receives n-1 blocks; its link is the bottleneck.
double busFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

void initInput(const OpArgs& a, void* sendbuff) {
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount,
                            [&](size_t i) { return braid::perf::rankValue(a.dtype, a.rank, i); });
}

// Only the root receives.
size_t check(const OpArgs& a, const void* recvbuff) {
  if (a.rank != a.root) return 0;
  const size_t block = a.counts.paramCount;
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount, [&](size_t i) {
    return braid::perf::rankValue(a.dtype, static_cast<int>(i / block), i % block);
  });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidGather(sendbuff, recvbuff, a.counts.paramCount, a.dtype, a.root, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"gather_perf", "braidGather", /*hasRedOp=*/false, /*hasRoot=*/true,
                               counts, busFactor, "(n-1)/n", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
