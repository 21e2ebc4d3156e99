#pragma once
// Liveness while joining through a store that cannot tell when a client is gone (PyTorch's
// c10d store, a caller's own store). braid's TCP store and etcd count a joining rank whose
// connection ends ("init-gone"), and ranks of one host watch each other's pids; through any
// other store a rank on another host that died, or was stopped, while the others wait for
// its records used to hold them for the whole timeout (torch's default is 30 minutes).
//
// Every joining rank runs a thread that adds 1 to its own counter "<prefix><rank>" every
// period and reads the counter of the next rank (rank + 1 mod nranks). A watched counter
// that has moved once and then stays put for `silence` seconds, over as many of the
// watcher's own rounds (a stalled store stalls those too, so it is not taken for a dead
// rank), makes status() an error naming that rank; the joining thread's polls return it and
// the communicator's abort record tells everyone else. A rank that has joined adds
// kJoined, after which it is no longer watched. A rank that never beat at all (not started
// yet) is not judged: the timeout still bounds that.
//
// One thread per joining communicator, for the length of the join only.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "bootstrap/store.h"
#include "common/status.h"

namespace braid::core {

class InitHeartbeat {
 public:
  static constexpr int64_t kJoined = int64_t{1} << 40;

  // The silence after which a rank is judged gone: a sixth of the join's timeout, within
  // [3 s, 10 s], and at least six periods. The period grows with the job (0.5 s up to 512
  // ranks, then nranks / 1024 s) so that the store sees about 2 * 1024 requests a second.
  static double silenceFor(double timeoutSec, int nranks);
  static double periodFor(int nranks);

  // Starts beating and watching at once. `store` must outlive this object.
  InitHeartbeat(bootstrap::Store& store, std::string prefix, int rank, int nranks, double silenceSec,
                double periodSec);
  ~InitHeartbeat();  // stops the thread (without marking the rank joined)
  InitHeartbeat(const InitHeartbeat&) = delete;
  InitHeartbeat& operator=(const InitHeartbeat&) = delete;

  // OK, or the error naming the watched rank once it is judged gone. Thread-safe.
  Status status() const;
  // This rank has joined: stops the thread and adds kJoined to its counter (best effort,
  // within `deadline`), so that its watcher stops watching.
  void joined(Deadline deadline);

 private:
  void loop();
  void stop();

  bootstrap::Store& store_;
  const std::string prefix_;
  const int rank_;
  const int watched_;
  const double silenceSec_;
  const double periodSec_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Status status_;
  std::thread thread_;
};

}  // namespace braid::core
