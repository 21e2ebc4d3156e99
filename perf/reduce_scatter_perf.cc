// reduce_scatter_perf: bandwidth and latency of braidReduceScatter, with nccl-tests' flags
// and table.
//
//   braidrun -np 4 reduce_scatter_perf -b 8 -e 256M -f 2 -o sum
//
// The size column is the whole input (nranks blocks), as in nccl-tests.

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int nranks) {
  CollCounts c;
  c.paramCount = count / static_cast<size_t>(nranks);
  c.recvCount = c.paramCount;
  c.sendCount = c.paramCount * static_cast<size_t>(nranks);
  c.recvInPlaceOffset = c.paramCount;  // in place: the result lands in this rank's block
  return c;
}

// Every rank sends n-1 blocks' worth of partial results and receives as many.
double busFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

void initInput(const OpArgs& a, void* sendbuff) {
  const braid::perf::ReduceValues v(a.dtype, a.op, a.nranks);
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount, [&](size_t i) { return v.input(a.rank, i); });
}

// Rank r holds the reduction of block r, i.e. of elements r*block .. (r+1)*block-1.
size_t check(const OpArgs& a, const void* recvbuff) {
  const braid::perf::ReduceValues v(a.dtype, a.op, a.nranks);
  const size_t base = static_cast<size_t>(a.rank) * a.counts.paramCount;
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount,
                                      [&](size_t i) { return v.expected(base + i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidReduceScatter(sendbuff, recvbuff, a.counts.paramCount, a.dtype, a.op, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"reduce_scatter_perf", "braidReduceScatter", /*hasRedOp=*/true, /*hasRoot=*/false,
                               counts, busFactor, "(n-1)/n", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
