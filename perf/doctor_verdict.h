#pragma once
// braid-doctor's reading of its matrices: which links are slow, and which ranks explain them.
// Kept apart from the tool so that the reading can be tested on matrices of known shape
// (tests/unit/api/test_doctor_verdict.cc) without a network that misbehaves on cue.

#include <string>
#include <vector>

namespace braid::perf {

struct DoctorFinding {
  int from, to;
  std::string why;  // the figure and the median it fell short of
};

struct DoctorRank {
  int rank;
  bool from, to;  // every link from it / to it is slow
};

struct DoctorVerdict {
  double bwMedian[2] = {0, 0}, latMedian[2] = {0, 0};  // [0] same-host links, [1] cross-host
  std::vector<char> slow;                              // n x n, row: from
  std::vector<DoctorFinding> links;                    // every slow link, row-major
  std::vector<DoctorRank> ranks;                       // slow ranks, worst first
  std::vector<DoctorFinding> lonely;                   // slow links no slow rank explains
  bool ok() const { return links.empty(); }
};

// `bw` (GB/s) and `lat` (us one way) are n x n, row: from; `hosts[i]` is rank i's host. A
// link is slow below `threshold` x the median bandwidth of its kind (same host, or not), or
// above that kind's median latency / `threshold` and `latencySlackUs` more than it.
//
// A slow rank is one all of whose links in one direction are slow, where a link that another
// slow rank already explains does not count, and at least two links are left to judge by: in
// three ranks with one slow sender, the other two have one unexplained incoming link each,
// and one slow link says nothing about the rank at its end. Ranks are taken worst first (by
// the mean shortfall of their links), so a rank that is slow in itself explains its links
// before a healthy rank at their other end could be blamed for them.
DoctorVerdict diagnose(const std::vector<std::string>& hosts, const std::vector<double>& bw,
                       const std::vector<double>& lat, double threshold, double latencySlackUs);

double median(std::vector<double> v);

}  // namespace braid::perf
