// Who competes for a rank's CPUs (core/cpu_share.h): the wire form of a rank's kernel and
// CPUs, and which ranks of a job count as sharing them.

#include <sched.h>

#include <string>
#include <vector>

#include "core/cpu_share.h"
#include "support/catch.h"

using braid::core::CpuRecord;
using braid::core::cpuShare;
using braid::core::decodeCpuRecord;
using braid::core::encodeCpuRecord;

namespace {

CpuRecord rec(const std::string& kernel, std::vector<int> cpus) { return CpuRecord{kernel, std::move(cpus)}; }

}  // namespace

TEST_CASE("cpu share: a record's wire form lists its CPUs as ranges and reads back the same", "[cpu_share]") {
  const CpuRecord r = rec("5f1c-boot", {0, 1, 2, 3, 8, 10, 11, 63});
  const std::string wire = encodeCpuRecord(r);
  CHECK(wire == "5f1c-boot 0-3,8,10-11,63");
  const CpuRecord back = decodeCpuRecord(wire);
  CHECK(back.kernel == "5f1c-boot");
  CHECK(back.cpus == r.cpus);
  CHECK(encodeCpuRecord(rec("k", {7})) == "k 7");
  // Unknown parts encode to nothing, which reads back as unknown.
  CHECK(encodeCpuRecord(rec("", {0, 1})).empty());
  CHECK(encodeCpuRecord(rec("k", {})).empty());
  CHECK(decodeCpuRecord("").kernel.empty());
}

TEST_CASE("cpu share: a malformed record is unknown, never a crash", "[cpu_share]") {
  for (const char* bad : {"k", "k ", " 0-1", "k 1-0", "k 3,2", "k 0-", "k x", "k 0-1;2", "k 0,,1", "k -1",
                          "k 0-99999", "k 1,1"}) {
    INFO(bad);
    const CpuRecord r = decodeCpuRecord(bad);
    CHECK(r.kernel.empty());
    CHECK(r.cpus.empty());
  }
}

TEST_CASE("cpu share: this process's record names its kernel and the CPUs it may run on", "[cpu_share]") {
  const CpuRecord me = braid::core::localCpuRecord();
  REQUIRE_FALSE(me.kernel.empty());
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  CHECK(static_cast<int>(me.cpus.size()) == CPU_COUNT(&set));
  for (int c : me.cpus) CHECK(CPU_ISSET(c, &set));
  CHECK(decodeCpuRecord(encodeCpuRecord(me)).cpus == me.cpus);
}

TEST_CASE("cpu share: ranks under one kernel on overlapping CPUs compete, whatever their host ids", "[cpu_share]") {
  // Three emulated hosts on a 2-CPU machine (network namespaces): every rank shares both.
  const std::vector<CpuRecord> emulated = {rec("k", {0, 1}), rec("k", {0, 1}), rec("k", {0, 1})};
  for (int r = 0; r < 3; ++r) {
    CHECK(cpuShare(emulated, r).ranks == 3);
    CHECK(cpuShare(emulated, r).cpus == 2);
  }
  // Ranks bound to disjoint CPUs (braidrun's blocks) compete with no one.
  const std::vector<CpuRecord> bound = {rec("k", {0, 1}), rec("k", {2, 3}), rec("k", {4, 5, 6, 7})};
  CHECK(cpuShare(bound, 0).ranks == 1);
  CHECK(cpuShare(bound, 0).cpus == 2);
  CHECK(cpuShare(bound, 2).ranks == 1);
  CHECK(cpuShare(bound, 2).cpus == 4);
  // An overlap counts the other rank and every CPU of its set.
  const std::vector<CpuRecord> overlap = {rec("k", {0, 1}), rec("k", {1, 2}), rec("k", {2, 3})};
  CHECK(cpuShare(overlap, 0).ranks == 2);
  CHECK(cpuShare(overlap, 0).cpus == 3);
  CHECK(cpuShare(overlap, 1).ranks == 3);
  CHECK(cpuShare(overlap, 1).cpus == 4);
  // Other kernels (real hosts) never count, nor do ranks whose records are unknown.
  const std::vector<CpuRecord> hosts = {rec("a", {0, 1}), rec("b", {0, 1}), rec("", {}), rec("a", {0})};
  CHECK(cpuShare(hosts, 0).ranks == 2);
  CHECK(cpuShare(hosts, 0).cpus == 2);
  CHECK(cpuShare(hosts, 1).ranks == 1);
  // A rank whose own record is unknown knows nothing: itself alone, CPUs unknown.
  CHECK(cpuShare(hosts, 2).ranks == 1);
  CHECK(cpuShare(hosts, 2).cpus == 0);
  CHECK(cpuShare(hosts, 7).ranks == 1);
}
