// Bruck alltoall on the mesh, for small blocks: ceil(log2 n) messages per rank instead of
// n-1, at the price of moving every block about log2(n)/2 times.
//
// Rank r first rotates its input so that tmp[i] is the block for rank (r+i) mod n. At step
// k (distance b = 2^k) every block whose index has bit k set moves b ranks on: it is packed
// into one message to rank r+b, and the same indices arrive from rank r-b. A block at index
// i has then travelled i ranks, so at rank q it came from rank q-i, and a last local pass
// stores tmp[i] at output block (q-i) mod n.
//
// The indices with bit k set form runs of b consecutive blocks, so packing and unpacking
// are a few copies. Pack, exchange and unpack are separate phases (rounds cut every step
// proportionally, which would not keep a packed message in step with the copies that fill
// it); the exchange sends before it receives, at most half a FIFO per round.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> alltoallBruck(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t blockBytes = req.count * es;
  Schedule s = meshSchedule(req, "bruck");
  exec::ChannelPlan& plan = s.channels[0];
  if (blockBytes == 0) return s;

  auto at = [&](Buf buf, size_t firstBlock, size_t num) {
    return Region{buf, firstBlock * blockBytes, num * blockBytes};
  };
  auto phase = [&](std::vector<Step> steps, size_t maxStepBytes) {
    if (steps.empty()) return;
    plan.phases.push_back(exec::Phase{plan.steps.size(), steps.size(), roundsFor(maxStepBytes, layout.smallRoundBytes)});
    for (Step& st : steps) plan.steps.push_back(st);
  };
  if (n == 1) {
    if (!req.inPlace) phase({Step{Prim::kCopy, -1, -1, at(Buf::kInput, 0, 1), at(Buf::kOutput, 0, 1)}}, blockBytes);
    return s;
  }

  // Scratch: tmp (n blocks), then a send pack and a receive pack of at most n/2 blocks each.
  const size_t un = static_cast<size_t>(n);
  const size_t packBlocks = un / 2;
  const size_t sendPack = un, recvPack = un + packBlocks;
  s.scratchBytes = (un + 2 * packBlocks) * blockBytes;

  // tmp[i] = input block (r+i) mod n: two contiguous copies.
  const size_t ur = static_cast<size_t>(r);
  phase({Step{Prim::kCopy, -1, -1, at(Buf::kInput, ur, un - ur), at(Buf::kScratch, 0, un - ur)},
         Step{Prim::kCopy, -1, -1, at(Buf::kInput, 0, ur), at(Buf::kScratch, un - ur, ur)}},
        un * blockBytes);
  for (size_t b = 1; b < un; b *= 2) {
    // Runs [i, i+b) of indices with bit b set, clipped to n.
    std::vector<Step> pack, unpack;
    size_t packed = 0;
    for (size_t i = b; i < un; i += 2 * b) {
      size_t num = std::min(b, un - i);
      pack.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, i, num), at(Buf::kScratch, sendPack + packed, num)});
      unpack.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, recvPack + packed, num), at(Buf::kScratch, i, num)});
      packed += num;
    }
    const int to = static_cast<int>((ur + b) % un), from = static_cast<int>((ur + un - b) % un);
    phase(std::move(pack), packed * blockBytes);
    phase({Step{Prim::kSend, -1, to, at(Buf::kScratch, sendPack, packed), {}},
           Step{Prim::kRecv, from, -1, {}, at(Buf::kScratch, recvPack, packed)}},
          packed * blockBytes);
    phase(std::move(unpack), packed * blockBytes);
  }
  // Output block (r-i) mod n = tmp[i].
  std::vector<Step> unrotate;
  for (size_t i = 0; i < un; ++i)
    unrotate.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, i, 1), at(Buf::kOutput, (ur + un - i) % un, 1)});
  phase(std::move(unrotate), blockBytes);
  return s;
}

}  // namespace braid::algorithms
