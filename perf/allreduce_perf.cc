// allreduce_perf: bandwidth and latency of braidAllReduce, with nccl-tests' flags and table.
//
//   braidrun -np 4 allreduce_perf -b 8 -e 256M -f 2 -d float -o sum

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int /*nranks*/) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;  // in place is sendbuff == recvbuff: both offsets stay 0
}

// A ring allreduce moves 2(n-1)/n of the message through each rank (reduce-scatter, then
// allgather), the least any algorithm can, so busbw is comparable to link bandwidth.
double busFactor(int nranks) { return nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0; }

void initInput(const OpArgs& a, void* sendbuff) {
  braid::perf::ReduceValues values(a.dtype, a.op, a.nranks);
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount,
                            [&](size_t i) { return values.input(a.rank, i); });
}

size_t check(const OpArgs& a, const void* recvbuff) {
  braid::perf::ReduceValues values(a.dtype, a.op, a.nranks);
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount,
                                      [&](size_t i) { return values.expected(i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidAllReduce(sendbuff, recvbuff, a.counts.paramCount, a.dtype, a.op, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"allreduce_perf", "braidAllReduce", /*hasRedOp=*/true, /*hasRoot=*/false,
                               counts, busFactor, "2(n-1)/n", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
