#pragma once
// The alpha-beta cost model: what a machine looks like to the planner (links inside and
// between hosts, the cost of local reduction and copies, slot geometry) and a closed-form
// prediction of every algorithm's time on it. The planner ranks algorithms by these
// predictions; the cost simulator (simulator.h) runs the real Schedules on the same
// Machine and is what tests hold the formulas to.

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace braid::plan {

// One kind of link: a message of b bytes takes alpha + b / beta, and costs the thread at
// each end `overhead` of CPU per message (slot hand-off, a system call for TCP).
struct Link {
  double alpha = 1e-6;     // seconds
  double beta = 1e10;      // bytes per second
  double overhead = 2e-7;  // seconds per message at each end
};

// The static per-transport table ("shm", "tcp", "loopback", ...); unknown names get the
// TCP figures, the conservative choice. Values are typical, not measured: see
// docs/scaling.md for where they come from.
Link transportLink(const std::string& transport);

// What the model and the simulator know about a job.
struct Machine {
  std::vector<int> hostOf;  // host index of every rank (0..nhosts-1)
  int nchannels = 1;        // ring channels available
  Link intra = transportLink("shm");
  Link inter = transportLink("tcp");
  // Local work per byte: a reduction reads two operands and writes one; a copy one each.
  double reduceBeta = 6e9;
  double copyBeta = 10e9;
  // Slot geometry of the two connection sets (see core/communicator.cc).
  size_t ringSlotBytes = 512 * 1024;
  int ringSlots = 8;
  size_t meshSlotBytes = 64 * 1024;
  int meshSlots = 4;
  // The tree allreduce's trees when the topology gave them (Layout::treeParent): the most
  // hops from any rank to its root, and the most host crossings on such a path. 0: the
  // trees are binaryTree()'s, log2(n) deep.
  int treeDepth = 0;
  int treeCrossings = 0;

  int nranks() const { return static_cast<int>(hostOf.size()); }
  int nhosts() const;
  // Most ranks any host holds.
  int maxRanksPerHost() const;
};

// `nhosts` hosts of `ranksPerHost` ranks each, ranks numbered host by host. Intra-host
// links default to shared memory, inter-host links to TCP; slot geometry follows the
// communicator's rule (stream slots when the job spans hosts).
Machine uniformMachine(int nhosts, int ranksPerHost, int nchannels = 1);

// The ring slot of tcp inside one host (BRAID_TRANSPORT=tcp, one host id), where a stream
// transport elsewhere cuts 64 KiB: a slot moves with one system call each way and there is
// no network to pipeline over. 128 KiB slots gave 1.02-1.21x the busbw of 64 KiB at 4-64 MiB
// (allreduce, allgather and reduce-scatter 1.02-1.21x, broadcast 1.02-1.11x, reduce
// 0.98-1.17x; 2 and 4 ranks), streams and alltoall unchanged, but up to 0.73x at 256 KiB,
// which the small-call slices below take back (docs/performance.md, "tcp inside one host:
// slots of 128 KiB"). Across hosts the 64 KiB slots stay, measured under the kernel's pacing.
constexpr size_t kLocalTcpSlotBytes = 128 * 1024;
// Calls of at most this many bytes (algorithms::requestBytes) still cut their ring steps into
// 64 KiB slices there: a step of such a call is a few slots at most, and smaller slices keep
// it pipelined (2-rank allreduce of 256 KiB: 95 us a call in 64 KiB slices, 131 in 128 KiB).
constexpr size_t kLocalTcpSmallCallBytes = 1024 * 1024;
// The mesh (scatter, gather, alltoall, point-to-point groups, trees) inside one host over tcp
// has slots of kLocalTcpSlotBytes too, two to a round. Against 64 KiB slots, alternated
// (docs/performance.md, "tcp inside one host: the mesh's slots"): sendrecv 1.06-1.20x from
// 256 KiB, scatter and gather 1.03-1.22x from 4 MiB, 4-rank alltoall 1.07-1.29x from 1 MiB.
// Calls of at most this many bytes keep 64 KiB slices and rounds of two of them: in 128 KiB
// slices scatter, gather and alltoall of 256 KiB had lost (0.88-0.95x). Point-to-point
// groups and alltoallv, whose byte counts differ by rank, take the slots at any size.
constexpr size_t kLocalTcpSmallMeshCallBytes = 512 * 1024;
constexpr size_t kLocalTcpSmallSliceBytes = 64 * 1024;

// The machine a communicator's layout describes, with the communicator's slot geometry
// (derived from roundBytes, which is half a FIFO) and the per-transport tables: every rank
// derives the same Machine from the same Layout. `forcedTransport` (BRAID_TRANSPORT), when
// set, replaces the links on both levels. Where the topology gave bandwidths
// (Layout::netGBps, intraGBps) they replace the tables' betas: the slowest rank's NIC for
// inter-host links (with a forced transport too), the slowest GPU-to-GPU ring hop for
// intra-host links (not with a forced transport); latencies and overheads stay the tables'.
Machine machineForLayout(const algorithms::Layout& layout, const std::string& forcedTransport = "");

// A prediction for one algorithm.
struct Prediction {
  const algorithms::AlgorithmInfo* algo = nullptr;
  int channels = 1;        // ring channels it should use (mesh algorithms: 1)
  size_t sliceBytes = 0;   // the slice the executor cuts its steps into
  double seconds = 0;
};

// Predicted time of `algo` for `req` on `machine` with `channels` ring channels, or a
// negative value when the algorithm does not apply there (hierarchical on one host, an
// algorithm for another collective).
double predictSeconds(const algorithms::AlgorithmInfo& algo, const algorithms::Request& req, const Machine& machine,
                      int channels);

// Every algorithm of `req.coll` that applies, each with its best channel count, cheapest
// first (ties keep the table's order).
// Channels a ring or chain algorithm should spread `req` over: all of them for large calls,
// fewer for small ones.
int channelsFor(const algorithms::Request& req, const Machine& machine);

std::vector<Prediction> rankAlgorithms(const algorithms::Request& req, const Machine& machine);

}  // namespace braid::plan
