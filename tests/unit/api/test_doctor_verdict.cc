// braid-doctor's reading of its matrices (perf/doctor_verdict.h), on matrices of known shape.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../../../perf/doctor_verdict.h"

namespace {

using braid::perf::diagnose;
using braid::perf::DoctorVerdict;

// n ranks on n hosts, every link at `gbs` GB/s and 80 us; set(i, j, gbs) changes one.
struct Net {
  int n;
  std::vector<std::string> hosts;
  std::vector<double> bw, lat;
  Net(int n_, double gbs) : n(n_), bw(static_cast<size_t>(n_) * n_, gbs), lat(static_cast<size_t>(n_) * n_, 80.0) {
    for (int i = 0; i < n; ++i) hosts.push_back("host" + std::to_string(i));
  }
  void set(int i, int j, double gbs) { bw[static_cast<size_t>(i) * n + j] = gbs; }
  DoctorVerdict read(double threshold) const { return diagnose(hosts, bw, lat, threshold, 10.0); }
};

std::vector<int> ranksOf(const DoctorVerdict& v) {
  std::vector<int> r;
  for (const auto& d : v.ranks) r.push_back(d.rank);
  return r;
}

}  // namespace

TEST_CASE("doctor: a healthy network is ok", "[doctor]") {
  Net net(4, 2.0);
  net.set(1, 2, 1.5);  // above half the median
  const auto v = net.read(0.5);
  CHECK(v.ok());
  CHECK(v.ranks.empty());
  CHECK(v.lonely.empty());
}

TEST_CASE("doctor: a slow sender among three is named alone, though one other link is slow by chance",
          "[doctor]") {
  // The figures of a run where host 2 sent at 40 Mbit/s and the link 1 -> 0 dipped: both
  // links to rank 0 are below the threshold, but one of them is rank 2's.
  Net net(3, 0);
  net.set(0, 1, 2.834), net.set(0, 2, 1.347);
  net.set(1, 0, 0.385), net.set(1, 2, 1.409);
  net.set(2, 0, 0.005), net.set(2, 1, 0.004);
  const auto v = net.read(0.5);
  REQUIRE(ranksOf(v) == std::vector<int>{2});
  CHECK(v.ranks[0].from);
  CHECK_FALSE(v.ranks[0].to);
  REQUIRE(v.lonely.size() == 1);  // 1 -> 0 is named as a link
  CHECK(v.lonely[0].from == 1);
  CHECK(v.lonely[0].to == 0);
  CHECK(v.links.size() == 3);
  CHECK_FALSE(v.ok());
}

TEST_CASE("doctor: a slow receiver is named, with the direction", "[doctor]") {
  Net net(4, 2.0);
  for (int i : {0, 1, 3}) net.set(i, 2, 0.1);
  const auto v = net.read(0.5);
  REQUIRE(ranksOf(v) == std::vector<int>{2});
  CHECK(v.ranks[0].to);
  CHECK_FALSE(v.ranks[0].from);
  CHECK(v.lonely.empty());
}

TEST_CASE("doctor: a rank slow both ways is named once", "[doctor]") {
  Net net(4, 2.0);
  for (int i : {0, 2, 3}) net.set(i, 1, 0.1), net.set(1, i, 0.1);
  const auto v = net.read(0.5);
  REQUIRE(ranksOf(v) == std::vector<int>{1});
  CHECK(v.ranks[0].from);
  CHECK(v.ranks[0].to);
  CHECK(v.lonely.empty());
}

TEST_CASE("doctor: two slow senders among five are both named, the worse first", "[doctor]") {
  Net net(5, 2.0);
  for (int j = 0; j < 5; ++j) {
    if (j != 1) net.set(1, j, 0.3);
    if (j != 3) net.set(3, j, 0.05);
  }
  const auto v = net.read(0.5);
  CHECK(ranksOf(v) == std::vector<int>{3, 1});
  CHECK(v.lonely.empty());
}

TEST_CASE("doctor: one slow link is a link, not a rank", "[doctor]") {
  Net net(3, 2.0);
  net.set(0, 1, 0.2);
  const auto v = net.read(0.5);
  CHECK(v.ranks.empty());
  REQUIRE(v.lonely.size() == 1);
  CHECK(v.lonely[0].why.find("bandwidth 0.200 GB/s") != std::string::npos);
}

TEST_CASE("doctor: high latency flags a link past the slack only", "[doctor]") {
  Net net(4, 2.0);
  net.lat[0 * 4 + 1] = 400.0;  // 5x the median
  net.lat[2 * 4 + 3] = 85.0;   // within the slack
  const auto v = net.read(0.5);
  REQUIRE(v.lonely.size() == 1);
  CHECK(v.lonely[0].from == 0);
  CHECK(v.lonely[0].to == 1);
  CHECK(v.lonely[0].why.find("latency 400.0 us") != std::string::npos);
}

TEST_CASE("doctor: links inside a host are judged against their own median", "[doctor]") {
  // Two hosts of two ranks: shared memory at 10 GB/s, the network at 1 GB/s; neither is slow.
  Net net(4, 1.0);
  net.hosts = {"a", "a", "b", "b"};
  net.set(0, 1, 10), net.set(1, 0, 10), net.set(2, 3, 10), net.set(3, 2, 10);
  const auto v = net.read(0.5);
  CHECK(v.ok());
  CHECK(v.bwMedian[0] == 10.0);
  CHECK(v.bwMedian[1] == 1.0);
}
