// allgather_perf: bandwidth and latency of braidAllGather, with nccl-tests' flags and table.
//
//   braidrun -np 4 allgather_perf -b 8 -e 256M -f 2
//
// The size column is the whole gathered buffer (nranks blocks), as in nccl-tests.

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

// Every rank receives the n-1 blocks it does not hold.
double busFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

void initInput(const OpArgs& a, void* sendbuff) {
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount,
                            [&](size_t i) { return braid::perf::rankValue(a.dtype, a.rank, i); });
}

size_t check(const OpArgs& a, const void* recvbuff) {
  const size_t block = a.counts.paramCount;
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount, [&](size_t i) {
    return braid::perf::rankValue(a.dtype, static_cast<int>(i / block), i % block);
  });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidAllGather(sendbuff, recvbuff, a.counts.paramCount, a.dtype, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"allgather_perf", "braidAllGather", /*hasRedOp=*/false, /*hasRoot=*/false,
                               counts, busFactor, "(n-1)/n", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
