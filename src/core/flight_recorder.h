#pragma once
// The flight recorder: every communicator remembers its last N collectives (sequence number,
// call, bytes, algorithm, state, times), so that a failure can say what each rank was doing
// and what it last completed, and BRAID_DEBUG_DUMP can write it out (text and JSON).
// Recording costs two uncontended spin locks, two coarse clock reads and a few stores per
// call (about 25 ns; a mutex and the precise clock cost 125); nothing is formatted until
// someone asks. Times have the coarse clock's resolution (a few milliseconds).

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/types.h"

namespace braid::core {

// What every rank must agree on for one collective.
struct CallShape {
  algorithms::Collective coll = algorithms::Collective::kAllReduce;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool preMul = false;  // a pre-multiplied sum (the op shown is "premul_sum")

  static CallShape of(const algorithms::Request& req);
};

// Whether `c` takes a reduction op, a root: the fields that then belong to its shape.
bool callHasOp(algorithms::Collective c);
bool callHasRoot(algorithms::Collective c);

// "allreduce count=1000 float sum", "broadcast count=10 int32 root=2", "barrier": the fields
// the collective uses, in the perf tools' names.
std::string describeCall(const CallShape& c);

class FlightRecorder {
 public:
  enum class State { kQueued, kRunning, kDone, kFailed };

  explicit FlightRecorder(size_t capacity = 64);

  // Called on the issuing thread, in sequence order. `running`: it starts at once (a blocking
  // call run on the caller's thread), so no started() follows.
  void queued(uint32_t seq, const CallShape& shape, size_t bytes, const std::string& algorithm, bool running = false);
  void started(uint32_t seq);
  // `peer`: the rank a failed operation was waiting for, or -1.
  void finished(uint32_t seq, bool ok, int peer = -1);

  // "#41 allreduce count=1000 float sum", or "" when `seq` is no longer (or not yet) held.
  std::string describe(uint32_t seq) const;
  // The newest `n` operations queued here, oldest first: (sequence, described as above).
  std::vector<std::pair<uint32_t, std::string>> recent(size_t n) const;
  // The newest operation that completed here, described as above; "" when none has.
  std::string lastCompleted() const;
  // What is in flight now, for a live view: the oldest operation not finished (`busy`), with
  // whether it runs yet and since when it was queued; otherwise the newest completed, and
  // when it ended (sinceNs 0 when none has). Times on the coarse monotonic clock.
  struct Current {
    bool busy = false;
    bool running = false;
    std::string op;  // "#41 allreduce count=1000 float sum", "" when nothing was recorded
    int64_t sinceNs = 0;
  };
  Current current() const;
  // The clock current() and the records use (CLOCK_MONOTONIC_COARSE, in ns).
  static int64_t clockNanos();

  // Oldest first: one line per operation with its state and times (ms since it was queued).
  std::string text() const;
  // The same as a JSON array of objects.
  std::string json() const;

 private:
  struct Entry {
    bool used = false;
    uint32_t seq = 0;
    CallShape shape;
    size_t bytes = 0;
    std::string algorithm;
    State state = State::kQueued;
    int peer = -1;
    int64_t queuedNs = 0, startNs = 0, endNs = 0;
  };
  // The entry `seq` goes to: a mask where the capacity is a power of two (the default), so
  // that no call divides.
  size_t slot(uint32_t seq) const { return pow2_ ? seq & (ring_.size() - 1) : seq % ring_.size(); }
  Entry* find(uint32_t seq);
  const Entry* find(uint32_t seq) const;
  std::vector<const Entry*> ordered() const;

  // A spin lock: held for a few stores, almost never contended.
  class Lock {
   public:
    explicit Lock(std::atomic_flag& f) : f_(f) {
      while (f_.test_and_set(std::memory_order_acquire)) {
      }
    }
    ~Lock() { f_.clear(std::memory_order_release); }

   private:
    std::atomic_flag& f_;
  };

  mutable std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::vector<Entry> ring_;
  bool pow2_ = false;  // ring_.size() is a power of two
  uint32_t lastQueued_ = 0;
  bool anyDone_ = false;
  uint32_t lastDone_ = 0;
};

const char* flightStateName(FlightRecorder::State s);

}  // namespace braid::core
