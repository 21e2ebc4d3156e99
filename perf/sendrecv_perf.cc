// sendrecv_perf: bandwidth and latency of a ring exchange, with nccl-tests' flags and table.
// Each rank sends to rank+1 and receives from rank-1 in one group (braidGroupStart, braidSend,
// braidRecv, braidGroupEnd), so every link carries one message each way at once.
// --one-way (braid's own flag): even rank r only sends to r+1 and odd rank r+1 only receives,
// so each pair's link carries one direction, as ucx_perftest's and osu_bw's streams do.
//
//   braidrun -np 4 sendrecv_perf -b 8 -e 256M -f 2
//   braidrun -np 2 sendrecv_perf -b 64K -e 16M -f 4 --one-way

#include <cstring>

#include "common.h"

namespace {

bool gOneWay = false;

// With --one-way: the rank this one sends to or receives from, or -1 (an odd count's last rank).
int oneWayPartner(int rank, int nranks) {
  const int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
  return partner < nranks ? partner : -1;
}

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
  // One way, only odd ranks receive; the others' receive buffers are not written.
  if (gOneWay && (a.rank % 2 == 0 || oneWayPartner(a.rank, a.nranks) < 0)) return 0;
  const int prev = (a.rank + a.nranks - 1) % a.nranks;
  return braid::perf::countMismatches(a.dtype, recvbuff, a.counts.recvCount,
                                      [&](size_t i) { return braid::perf::rankValue(a.dtype, prev, i); });
}

braidResult_t run(const OpArgs& a, const void* sendbuff, void* recvbuff, braidComm_t comm) {
  if (gOneWay) {
    const int partner = oneWayPartner(a.rank, a.nranks);
    if (partner < 0) return braidSuccess;
    if (a.rank % 2 == 0) return braidSend(sendbuff, a.counts.paramCount, a.dtype, partner, comm, a.stream);
    return braidRecv(recvbuff, a.counts.paramCount, a.dtype, partner, comm, a.stream);
  }
  const int next = (a.rank + 1) % a.nranks;
  const int prev = (a.rank + a.nranks - 1) % a.nranks;
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return r;
  // Errors of the recorded calls come back from braidGroupEnd too, which must run anyway to
  // close the group.
  braidResult_t s = braidSend(sendbuff, a.counts.paramCount, a.dtype, next, comm, a.stream);
  braidResult_t v = braidRecv(recvbuff, a.counts.paramCount, a.dtype, prev, comm, a.stream);
  r = braidGroupEnd();
  return s != braidSuccess ? s : v != braidSuccess ? v : r;
}

}  // namespace

int main(int argc, char** argv) {
  // braid's own flag, taken out before the nccl-tests ones are parsed.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--one-way") == 0) gOneWay = true;
    else argv[kept++] = argv[i];
  }
  argv[kept] = nullptr;
  braid::perf::Tool tool{"sendrecv_perf", "braidSend/braidRecv", /*hasRedOp=*/false, /*hasRoot=*/false,
                         counts, busFactor, "1", initInput, check, run};
  tool.extraHelp =
      "      --one-way              even rank r sends to r+1, which only receives: one direction per pair,\n"
      "                             as ucx_perftest's bandwidth tests (default: a ring, both directions)\n";
  return braid::perf::runTool(tool, kept, argv);
}
