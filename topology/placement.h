#pragma once
// Placement: where the calling thread runs and where memory lives, on this machine.
//
// The engine asks this on every rank to pin its progress thread and its staging buffers to
// the NUMA node nearest the NIC or GPU it drives; a remote-NUMA staging buffer costs
// a third or more of the memory bandwidth on two-socket hosts. hwloc stays behind a pimpl
// so that no other layer sees hwloc headers.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace braid::topology {

class Placement {
 public:
  // The placement of this machine. Loads the hwloc topology once, lazily, on first call;
  // thread-safe. If hwloc fails to load, the returned object reports a single NUMA node,
  // one core per online CPU, and every bind is an Ok no-op (placement is an optimisation,
  // never a reason to fail a job).
  static Placement& local();

  ~Placement();
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;

  // NUMA node (OS index) of the CPU the calling thread last ran on, or -1 when unknown.
  // Thread-safe; does not block.
  int numaNodeOfCaller() const;

  // Binds the calling thread to the cores of NUMA node `numaNode` (OS index). Ok no-op when
  // `numaNode` is -1 or the machine has a single NUMA node. kInvalidArgument for an unknown
  // node; kSystemError when the OS refuses. Thread-safe.
  [[nodiscard]] Status bindThreadToNuma(int numaNode) const;

  // Binds the pages of [addr, addr + bytes) to NUMA node `numaNode` (hwloc BIND policy,
  // migrating pages already touched). Ok no-op for -1, a single-node machine, or bytes == 0.
  // The caller keeps ownership of the memory. Thread-safe.
  [[nodiscard]] Status bindMemoryToNuma(void* addr, size_t bytes, int numaNode) const;

  // Physical cores (not hardware threads) of this machine; at least 1.
  int numCores() const;
  // NUMA nodes of this machine; at least 1.
  int numNumaNodes() const;
  // OS indices of the NUMA nodes, ascending.
  const std::vector<int>& numaNodes() const;
  // Number of cores whose PUs all belong to NUMA node `numaNode`, or 0 for an unknown node.
  int coresOfNuma(int numaNode) const;
  // One line for the init summary, e.g. "2 NUMA nodes, 32 cores, 64 PUs".
  std::string summary() const;

 private:
  struct Impl;
  Placement();
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::topology
