// How the executor hands its reductions to a transport that reduces payloads as they arrive
// (Connection::peekRecvReduce, expectReduce), over real transport pairs. Over shm a wrapper
// plays such a transport: it peeks the slot and applies the executor's reduction itself, in
// two uneven pieces. Over UCX the plugin does it: here over UCX's shared memory, where
// BRAID_UCX_REDUCE_ON_ARRIVAL=1 asks for it, with eager messages and with rendezvous ones;
// and (CMakeLists.txt) over UCX_TLS=tcp,self, where it is the default and every message
// goes eager. Either way the wrapper checks the contract a transport relies on: a
// message is asked for with the destination and source it was announced with, and the
// executor neither reads the destination nor writes the source in between (the destination
// is scribbled on when announced). A ring allreduce, in place or not, and a step that reduces
// into the next peer's slot still come out exact.
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "exec/executor.h"
#include "harness.h"
#include "pair_channel.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::exec;
using namespace braid::transport;
using namespace braid::transport::test;

namespace {

uint64_t checksum(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

class Arriving final : public Forwarding {
 public:
  using Forwarding::Forwarding;

  bool reducesOnArrival() const override { return true; }
  bool takesAnnouncements() const override { return true; }

  Status expectReduce(size_t ahead, void* dst, size_t bytes, const ArrivalReduce& r) override {
    const uint64_t m = released_ + ahead;
    if (ahead > 0 && !words_.count(m - 1)) fault("message " + std::to_string(m) + " announced before the one before it");
    auto it = words_.find(m);
    if (it != words_.end()) {
      if (it->second.dst != dst || it->second.bytes != bytes || it->second.local != r.local)
        fault("message " + std::to_string(m) + " announced again with other words");
    } else {
      // In place (the source is the destination) the transport may write both from now on.
      const char* d = static_cast<const char*>(dst);
      const char* l = static_cast<const char*>(r.local);
      const bool apart = d + bytes <= l || l + bytes <= d;
      words_[m] = Word{dst, r.local, bytes, apart ? checksum(r.local, bytes) : 0, apart};
      if (apart) std::memset(dst, 0xA5, bytes);
      ++announced;
    }
    return in_->reducesOnArrival() ? in_->expectReduce(ahead, dst, bytes, r) : in_->expectRecv(ahead, nullptr, bytes);
  }

  Status peekRecvReduce(Slot* s, void* dst, size_t bytes, const ArrivalReduce& r) override {
    auto it = words_.find(released_);
    if (it != words_.end()) {
      if (it->second.dst != dst || it->second.bytes != bytes || it->second.local != r.local)
        fault("message " + std::to_string(released_) + " asked for with other words than announced");
      else if (it->second.apart && checksum(r.local, bytes) != it->second.sum)
        fault("message " + std::to_string(released_) + ": what it is reduced with changed after it was announced");
    }
    if (in_->reducesOnArrival()) {
      Status st = in_->peekRecvReduce(s, dst, bytes, r);
      if (st.isOk() && s->data == dst && !held_) {
        held_ = true;
        ++reduced;
      }
      return st;
    }
    if (!held_) {
      BRAID_RETURN_IF_ERROR(in_->peekRecv(&inner_));
      // The reduction in two uneven pieces of whole elements, the later one first.
      const size_t n = std::min(inner_.bytes, bytes) / r.elemBytes * r.elemBytes;
      const size_t cut = n / r.elemBytes / 3 * r.elemBytes;
      const char* p = static_cast<const char*>(inner_.data);
      const char* l = static_cast<const char*>(r.local);
      char* d = static_cast<char*>(dst);
      r.fn(r.ctx, d + cut, p + cut, l + cut, n - cut);
      if (cut) r.fn(r.ctx, d, p, l, cut);
      held_ = true;
      ++reduced;
    }
    *s = inner_;
    s->data = dst;
    return Status::ok();
  }

  Status releaseRecv(const Slot& s) override {
    words_.erase(released_++);
    if (!held_) return in_->releaseRecv(s);
    held_ = false;
    return in_->reducesOnArrival() ? in_->releaseRecv(s) : in_->releaseRecv(inner_);
  }

  size_t announced = 0;  // messages announced with their reduction
  size_t reduced = 0;    // messages reduced on arrival
  std::string faults;

 private:
  struct Word {
    void* dst;
    const void* local;
    size_t bytes;
    uint64_t sum;
    bool apart;  // dst and local do not meet
  };
  void fault(const std::string& f) {
    if (faults.empty()) faults = f;
  }
  uint64_t released_ = 0;
  std::map<uint64_t, Word> words_;
  bool held_ = false;
  Slot inner_;
};

float valueOf(int rank, int run, size_t i) { return pairValue(rank, run, i); }

// Each rank sends its `src` (its input, or its output holding the same) and receives the
// peer's into its output, reduced with that `src`: the sum of the two ranks' values.
Schedule reducedInto(int peer, size_t bytes, Buf src) {
  return oneChannelSum("reduced into the output",
                       {Step{Prim::kSend, -1, peer, Region{src, 0, bytes}, {}},
                        Step{Prim::kRecvReduce, peer, -1, Region{src, 0, bytes}, Region{Buf::kOutput, 0, bytes}}});
}

// Each rank sends the first half of its input; reduces what comes with the second half and
// sends that on (into the peer's slot, kRecvReduceSend); and takes what comes back as its
// output: rank r's output is its first half plus the peer's second half.
Schedule forwardReduced(int peer, size_t bytes) {
  return oneChannelSum("forward reduced", {Step{Prim::kSend, -1, peer, Region{Buf::kInput, 0, bytes}, {}},
                                           Step{Prim::kRecvReduceSend, peer, peer, Region{Buf::kInput, bytes, bytes}, {}},
                                           Step{Prim::kRecv, peer, -1, {}, Region{Buf::kOutput, 0, bytes}}});
}

std::string runCases(Endpoint& ep, size_t sliceBytes) {
  std::string err = setupPair(ep, 1);
  if (!err.empty()) return err;
  Arriving in(ep.recv[0].get());
  CountedSend out(ep.send[0].get());
  PairChannel channel(ep, &in, &out, sliceBytes);
  auto run = [&](const Schedule& s, const std::string& what, const void* input, void* output, bool prepared) {
    std::string e = channel.run(s, what, input, output, prepared);
    if (e.empty() && !in.faults.empty()) e = what + ": " + in.faults;
    return e;
  };

  // Ring allreduce: two slices per step and a bit, in one round or in rounds of one slice.
  const size_t floatsPerSlice = sliceBytes / sizeof(float);
  for (size_t roundSlices : {size_t{4}, size_t{1}}) {
    std::string e = ringAllreduceRuns(ep.rank, 2 * (2 * floatsPerSlice + 3), roundSlices * sliceBytes, run);
    if (!e.empty()) return e;
  }

  // A reduction into the output, out of place and in place (the source is the output).
  const size_t n = 3 * floatsPerSlice + 5;
  for (bool inPlace : {false, true}) {
    const size_t before = in.reduced;
    for (int r = 0; r < 2; ++r) {
      std::vector<float> input(n), output(n, -1.0f);
      for (size_t i = 0; i < n; ++i) input[i] = valueOf(ep.rank, r, i);
      if (inPlace) output = input;
      const std::string what = std::string("a reduction into the output") + (inPlace ? ", in place" : "") +
                               ", run " + std::to_string(r);
      const Buf src = inPlace ? Buf::kOutput : Buf::kInput;
      std::string e = run(reducedInto(ep.peer, n * sizeof(float), src), what, input.data(), output.data(), r == 1);
      if (!e.empty()) return e;
      for (size_t i = 0; i < n; ++i) {
        if (output[i] != valueOf(0, r, i) + valueOf(1, r, i))
          return what + ": element " + std::to_string(i) + " is " + std::to_string(output[i]);
      }
    }
    if (in.reduced == before)
      return std::string("a reduction into the output") + (inPlace ? ", in place" : "") + ": nothing reduced on arrival";
  }
  if (in.announced == 0) return "no reduction was announced ahead";

  // A reduction into the next peer's slot: two slices, so that the first step's sends leave
  // half the FIFO free (both ranks send before they receive).
  const size_t m = floatsPerSlice + 5;
  for (int r = 0; r < 3; ++r) {
    const size_t n = m;
    std::vector<float> input(2 * n), output(n, -1.0f);
    for (size_t i = 0; i < 2 * n; ++i) input[i] = valueOf(ep.rank, r, i);
    const std::string what = "a reduction forwarded, run " + std::to_string(r);
    const size_t before = in.reduced;
    std::string e = run(forwardReduced(ep.peer, n * sizeof(float)), what, input.data(), output.data(), r == 2);
    if (!e.empty()) return e;
    for (size_t i = 0; i < n; ++i) {
      if (output[i] != valueOf(ep.rank, r, i) + valueOf(ep.peer, r, n + i))
        return what + ": element " + std::to_string(i) + " is " + std::to_string(output[i]);
    }
    if (in.reduced == before) return what + ": no payload was reduced into the next peer's slot on arrival";
  }
  return "";
}

// Sets an environment variable for the life of a scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST_CASE("reductions handed to a transport that reduces payloads as they arrive", "[transport][executor]") {
  TransportConfig cfg = loopbackPairConfig(0, 0);
  cfg.nslots = 4;
  // Eager messages (16 KiB), then UCX's rendezvous (128 KiB, above the 64 KiB braid sets
  // where shared memory is in use), both reduced on arrival when asked for; and UCX's own
  // choice, which over its shared memory reduces eager messages only.
  struct Case {
    size_t slice;
    const char* arrival;  // BRAID_UCX_REDUCE_ON_ARRIVAL
  };
  for (const Case& c : {Case{16 << 10, "1"}, Case{128 << 10, "1"}, Case{16 << 10, nullptr}}) {
    ScopedEnv env("BRAID_UCX_REDUCE_ON_ARRIVAL", c.arrival);
    cfg.slotBytes = std::max<size_t>(64 << 10, c.slice);  // UCX posts receives on demand from 64 KiB
    const size_t slice = c.slice;
    for (const auto& [name, result] :
         runOnThreadPairs({"shm", "ucx"}, cfg, [slice](Endpoint& ep) { return runCases(ep, slice); })) {
      INFO(name << ", slices of " << slice << " B, BRAID_UCX_REDUCE_ON_ARRIVAL=" << (c.arrival ? c.arrival : "(unset)"));
      CHECK(result == "");
    }
  }
}
