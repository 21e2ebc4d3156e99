// sendrecv_perf: bandwidth and latency of a ring exchange, with nccl-tests' flags and table.
// Each rank sends to rank+1 and receives from rank-1 in one group (braidGroupStart, braidSend,
// braidRecv, braidGroupEnd), so every link carries one message each way at once.
//
//   braidrun -np 4 sendrecv_perf -b 8 -e 256M -f 2

#include "common.h"

namespace {

using braid::perf::CollCounts;
using braid::perf::OpArgs;

CollCounts counts(size_t count, int /*nranks*/) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;
}

// Each rank's message crosses one link once.
double busFactor(int /*nranks*/) { return 1.0; }

void initInput(const OpArgs& a, void* sendbuff) {
  braid::perf::fillElements(a.dtype, sendbuff, a.counts.sendCount,
                            [&](size_t i) { return braid::perf::rankValue(a.dtype, a.rank, i); });
}

size_t check(const OpArgs& a, const void* recvbuff) {
  const int prev = (a.rank + a.nranks - 1) % a.nranks;
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount,
                                      [&](size_t i) { return braid::perf::rankValue(a.dtype, prev, i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  const int next = (a.rank + 1) % a.nranks;
  const int prev = (a.rank + a.nranks - 1) % a.nranks;
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return r;
  // Errors of the recorded calls come back from braidGroupEnd too, which must run anyway to
  // close the group.
  braidResult_t s = braidSend(sendbuff, a.counts.paramCount, a.dtype, next, comm, /*stream=*/nullptr);
  braidResult_t v = braidRecv(recvbuff, a.counts.paramCount, a.dtype, prev, comm, /*stream=*/nullptr);
  r = braidGroupEnd();
  return s != braidSuccess ? s : v != braidSuccess ? v : r;
}

}  // namespace

int main(int argc, char** argv) {
  const braid::perf::Tool tool{"sendrecv_perf", "braidSend/braidRecv", /*hasRedOp=*/false, /*hasRoot=*/false,
                               counts, busFactor, "1", initInput, check, run};
  return braid::perf::runTool(tool, argc, argv);
}
