#pragma once
// Which ranks compete for the CPUs a rank waits on. Spinning while waiting for a peer pays
// only while every busy thread has a CPU of its own; a spinner that shares its CPU with the
// peer it waits for holds that peer off until it yields. braid counts the ranks of a host by
// host id, but ranks with host ids of their own can run under one kernel on the same CPUs:
// emulated hosts in network namespaces, containers that each have a hostname. Each rank
// therefore publishes its kernel's boot id and the CPUs it may run on, and the ranks under
// its kernel whose CPUs overlap its own are the ones it competes with.

#include <string>
#include <vector>

namespace braid::core {

struct CpuRecord {
  std::string kernel;     // the kernel's boot id; "" when unknown
  std::vector<int> cpus;  // the CPUs the rank may run on, ascending; empty when unknown
};

// This process's record: /proc/sys/kernel/random/boot_id and sched_getaffinity. Does not
// block; unknown parts stay empty.
CpuRecord localCpuRecord();

// Wire form: "<kernel> <cpus>", the CPUs as a list of ranges ("0-3,8,10-11").
std::string encodeCpuRecord(const CpuRecord& r);
// The record `text` encodes; an empty or malformed one (an older braid's peer record has
// none) is unknown, which counts no one but the rank itself.
CpuRecord decodeCpuRecord(const std::string& text);

struct CpuShare {
  int ranks = 1;  // ranks under this kernel whose CPUs overlap this rank's, itself included
  int cpus = 0;   // CPUs of the union of their sets; 0 when this rank's own record is unknown
  std::vector<int> others;  // those ranks but this one, ascending
};

// What `records[self]` shares with the others (`records` holds every rank's, in rank order).
CpuShare cpuShare(const std::vector<CpuRecord>& records, int self);

}  // namespace braid::core
