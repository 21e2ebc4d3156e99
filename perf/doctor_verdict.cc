#include "doctor_verdict.h"

#include <algorithm>
#include <cstdio>

namespace braid::perf {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

DoctorVerdict diagnose(const std::vector<std::string>& hosts, const std::vector<double>& bw,
                       const std::vector<double>& lat, double threshold, double latencySlackUs) {
  const int n = static_cast<int>(hosts.size());
  auto idx = [n](int i, int j) { return static_cast<size_t>(i) * n + j; };
  auto kind = [&](int i, int j) { return hosts[i] == hosts[j] ? 0 : 1; };
  DoctorVerdict v;
  std::vector<double> bwKind[2], latKind[2];
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) {
        bwKind[kind(i, j)].push_back(bw[idx(i, j)]);
        latKind[kind(i, j)].push_back(lat[idx(i, j)]);
      }
  for (int k = 0; k < 2; ++k) {
    v.bwMedian[k] = median(bwKind[k]);
    v.latMedian[k] = median(latKind[k]);
  }

  // How far below its kind a link is: 1 at the median, smaller when slower, by whichever of
  // bandwidth and latency is worse.
  std::vector<double> score(static_cast<size_t>(n) * n, 1.0);
  v.slow.assign(static_cast<size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const int k = kind(i, j);
      const double b = bw[idx(i, j)], l = lat[idx(i, j)];
      if (v.bwMedian[k] > 0) score[idx(i, j)] = std::min(score[idx(i, j)], b / v.bwMedian[k]);
      if (l > 0) score[idx(i, j)] = std::min(score[idx(i, j)], v.latMedian[k] / l);
      char why[160] = "";
      if (b < threshold * v.bwMedian[k]) {
        std::snprintf(why, sizeof(why), "bandwidth %.3f GB/s is below %.2f x the median %.3f of %s links", b,
                      threshold, v.bwMedian[k], k ? "cross-host" : "same-host");
      } else if (l > v.latMedian[k] / threshold && l - v.latMedian[k] > latencySlackUs) {
        std::snprintf(why, sizeof(why), "latency %.1f us is above the median %.1f us of %s links / %.2f", l,
                      v.latMedian[k], k ? "cross-host" : "same-host", threshold);
      }
      if (why[0]) {
        v.slow[idx(i, j)] = 1;
        v.links.push_back({i, j, why});
      }
    }

  // Greedy: the worst rank whose unexplained links in one direction are all slow (two at
  // least) explains them; repeat until no rank qualifies.
  std::vector<char> explained(static_cast<size_t>(n) * n, 0);
  std::vector<char> taken(n, 0);
  // The mean score of r's unexplained links in one direction (0: from r, 1: to r) when
  // there are two or more and every one is slow; a negative number otherwise.
  auto judge = [&](int r, int dir) {
    int count = 0;
    bool all = true;
    double sum = 0;
    for (int o = 0; o < n; ++o) {
      if (o == r) continue;
      const size_t e = dir == 0 ? idx(r, o) : idx(o, r);
      if (explained[e]) continue;
      ++count;
      all = all && v.slow[e];
      sum += score[e];
    }
    return count >= 2 && all ? sum / count : -1.0;
  };
  for (;;) {
    int best = -1, bestDir = 0;
    double bestScore = 2.0;
    for (int r = 0; r < n; ++r) {
      if (taken[r]) continue;
      for (int dir = 0; dir < 2; ++dir) {
        const double m = judge(r, dir);
        if (m >= 0 && m < bestScore) {
          best = r;
          bestDir = dir;
          bestScore = m;
        }
      }
    }
    if (best < 0) break;
    taken[best] = 1;
    // The other direction counts too when it qualifies on its own.
    DoctorRank dr{best, bestDir == 0, bestDir == 1};
    if (judge(best, 1 - bestDir) >= 0) dr.from = dr.to = true;
    for (int o = 0; o < n; ++o) {
      if (o == best) continue;
      if (dr.from) explained[idx(best, o)] = 1;
      if (dr.to) explained[idx(o, best)] = 1;
    }
    v.ranks.push_back(dr);
  }
  for (const auto& f : v.links)
    if (!explained[idx(f.from, f.to)]) v.lonely.push_back(f);
  return v;
}

}  // namespace braid::perf
