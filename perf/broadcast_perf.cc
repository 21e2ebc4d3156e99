// broadcast_perf: bandwidth and latency of braidBroadcast, with nccl-tests' flags and table.
//
//   braidrun -np 4 broadcast_perf -b 8 -e 256M -f 2 -r 0     (-r all: every root in turn)

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int /*nranks*/) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;
}

// Every rank receives the message once (pipelined through a chain or tree), so bus and
// algorithm bandwidth coincide.
double busFactor(int /*nranks*/) { return 1.0; }

// Every rank, not only the root, fills its input with its own values: in place on a
// non-root rank that is the buffer the broadcast must overwrite, and out of place it shows
// up if a library reads a non-root's send buffer.
void initInput(const OpArgs& a, void* sendbuff) {
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount,
                            [&](size_t i) { return braid::perf::rankValue(a.dtype, a.rank, i); });
}

size_t check(const OpArgs& a, const void* recvbuff) {
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount,
                                      [&](size_t i) { return braid::perf::rankValue(a.dtype, a.root, i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  return braidBroadcast(sendbuff, recvbuff, a.counts.paramCount, a.dtype, a.root, comm, a.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"broadcast_perf", "braidBroadcast", /*hasRedOp=*/false, /*hasRoot=*/true,
                               counts, busFactor, "1", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
