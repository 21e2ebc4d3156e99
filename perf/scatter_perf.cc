// scatter_perf: bandwidth and latency of braidScatter, with nccl-tests' flags and table.
//
//   braidrun -np 4 scatter_perf -b 8 -e 256M -f 2 -r 0     (-r all: every root in turn)
//
// The size column is the root's whole send buffer (nranks blocks), as in nccl-tests.

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int nranks) {
  CollCounts c;
  c.paramCount = count / static_cast<size_t>(nranks);
  c.sendCount = c.paramCount * static_cast<size_t>(nranks);
  c.recvCount = c.paramCount;
  c.recvInPlaceOffset = c.paramCount;  // in place: each rank's block of the send buffer
  return c;
}

// The root sends n-1 blocks; its link is the bottleneck.
double busFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

// Only the root's input is read: block j (bound for rank j) holds rankValue(j, k). Other
// ranks leave the buffer as the harness filled it (the sentinel): in place their receive
// block lies inside it, and must not already hold the expected values.
void initInput(const OpArgs& a, void* sendbuff) {
  if (a.rank != a.root) return;
  const size_t block = a.counts.paramCount;
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount, [&](size_t i) {
    return braid::perf::rankValue(a.dtype, static_cast<int>(i / block), i % block);
  });
}

size_t check(const OpArgs& a, const void* recvbuff) {
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount,
                                      [&](size_t i) { return braid::perf::rankValue(a.dtype, a.rank, i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidScatter(sendbuff, recvbuff, a.counts.paramCount, a.dtype, a.root, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"scatter_perf", "braidScatter", /*hasRedOp=*/false, /*hasRoot=*/true,
                               counts, busFactor, "(n-1)/n", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
