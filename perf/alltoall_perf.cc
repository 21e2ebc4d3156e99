// alltoall_perf: bandwidth and latency of braidAllToAll, with nccl-tests' flags and table.
//
//   braidrun -np 4 alltoall_perf -b 8 -e 256M -f 2
//
// The size column is a rank's whole send buffer (nranks blocks), as in nccl-tests.

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int nranks) {
  CollCounts c;
  c.paramCount = count / static_cast<size_t>(nranks);
  c.sendCount = c.recvCount = c.paramCount * static_cast<size_t>(nranks);
  return c;
}

// Every rank sends n-1 of its n blocks away and receives as many.
double busFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

// Block j of rank r's input (bound for rank j) is rankValue(r, j*block + k): the value names
// the sender, and the index names the destination block.
void initInput(const OpArgs& a, void* sendbuff) {
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount,
                            [&](size_t i) { return braid::perf::rankValue(a.dtype, a.rank, i); });
}

// Block i of rank r's output is block r of rank i's input.
size_t check(const OpArgs& a, const void* recvbuff) {
  const size_t block = a.counts.paramCount;
  const size_t mine = static_cast<size_t>(a.rank) * block;
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount, [&](size_t i) {
    return braid::perf::rankValue(a.dtype, static_cast<int>(i / block), mine + i % block);
  });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidAllToAll(sendbuff, recvbuff, a.counts.paramCount, a.dtype, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"alltoall_perf", "braidAllToAll", /*hasRedOp=*/false, /*hasRoot=*/false,
                               counts, busFactor, "(n-1)/n", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
