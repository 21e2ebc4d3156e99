// reduce_perf: bandwidth and latency of braidReduce, with nccl-tests' flags and table.
//
//   braidrun -np 4 reduce_perf -b 8 -e 256M -f 2 -o sum -r 0     (-r all: every root in turn)

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int /*nranks*/) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;
}

// The message flows once through every link of a chain or tree towards the root, so bus and
// algorithm bandwidth coincide (nccl-tests' factor for reduce).
double busFactor(int /*nranks*/) { return 1.0; }

void initInput(const OpArgs& a, void* sendbuff) {
  const braid::perf::ReduceValues v(a.dtype, a.op, a.nranks);
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount, [&](size_t i) { return v.input(a.rank, i); });
}

// Only the root's receive buffer holds a result; elsewhere the call must not touch it, and
// nothing here depends on what it holds.
size_t check(const OpArgs& a, const void* recvbuff) {
  if (a.rank != a.root) return 0;
  const braid::perf::ReduceValues v(a.dtype, a.op, a.nranks);
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount, [&](size_t i) { return v.expected(i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidReduce(sendbuff, recvbuff, a.counts.paramCount, a.dtype, a.op, a.root, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"reduce_perf", "braidReduce", /*hasRedOp=*/true, /*hasRoot=*/true,
                               counts, busFactor, "1", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
