#pragma once
// The in-process world: every rank is a thread with its own Communicator, rendezvousing
// through an in-memory store and connected by the loopback transport. It runs the real
// engine (planner, schedules, executor, kernels) without sockets or processes.

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/memory_store.h"
#include "core/communicator.h"
#include "transports/transport.h"

namespace braid::testing {

// Whether transport `name` is registered and can run here (a plugin may be absent or find
// nothing to drive).
inline bool transportAvailable(const std::string& name) {
  for (const transport::TransportFactory& f : transport::registry()) {
    if (name != f.name) continue;
    transport::TransportConfig probe;
    probe.nranks = 2;
    return f.create(probe).isOk();
  }
  return false;
}

struct WorldOptions {
  int nranks = 2;
  int nchannels = 1;
  size_t slotBytes = 64 * 1024;
  int nslots = 4;
  double timeoutSec = 60;
  std::string transport = "loopback";
  std::string algo;  // BRAID_ALGO, to force an algorithm
  int ranksPerHost = 0;  // > 0: pretend ranks r / ranksPerHost share a host (hierarchical algorithms)
  std::string debugDump;  // BRAID_DEBUG_DUMP
  int noSendAcksRank = -1;  // this rank runs with BRAID_SEND_ACKS=0
  int ringAhead = 1;  // BRAID_RING_AHEAD: on, so rings of more ranks than cores run ahead too
};

// Runs `body(comm)` on every rank, each in its own thread, and returns the first failure
// to create a communicator (or Ok). `body` reports its own failures (e.g. through counters).
inline Status runWorld(const WorldOptions& o, const std::function<void(core::Communicator&)>& body) {
  auto store = std::make_shared<bootstrap::MemoryStore>();
  std::vector<Status> init(static_cast<size_t>(o.nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < o.nranks; ++r) {
    threads.emplace_back([&, r] {
      core::CommOptions opts;
      opts.config.nchannels = o.nchannels;
      opts.config.slotBytes = o.slotBytes;
      opts.config.nslots = o.nslots;
      opts.config.timeoutSec = o.timeoutSec;
      opts.config.transport = o.transport;
      opts.config.algo = o.algo;
      opts.config.debugDump = o.debugDump;
      opts.config.sendAcks = r != o.noSendAcksRank;
      opts.config.ringAhead = o.ringAhead;
      if (o.ranksPerHost > 0) opts.config.hostId = "host" + std::to_string(r / o.ranksPerHost);
      opts.config.bind = false;
      opts.nonce = 0x5eed0000u + static_cast<uint64_t>(o.nranks);
      auto comm = core::Communicator::create(store, r, o.nranks, opts);
      if (!comm.isOk()) {
        init[r] = comm.status();
        return;
      }
      body(*comm.value());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : init)
    if (!s.isOk()) return s;
  return Status::ok();
}

}  // namespace braid::testing
