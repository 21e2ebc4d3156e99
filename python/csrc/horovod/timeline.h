#pragma once
// Horovod's timeline: a Chrome trace (chrome://tracing, Perfetto) of what each tensor went
// through on rank 0: NEGOTIATE_<OP> from submission until every rank had submitted it, then
// <OP> with its activities (MEMCPY_IN_FUSION_BUFFER, BRAID_<OP>, MEMCPY_OUT_FUSION_BUFFER),
// and CYCLE_START marks when cycles are marked. Each tensor is a "process" of the trace,
// named by a metadata event, as Horovod's own timeline does.
//
// HOROVOD_TIMELINE=<file> starts it at init (HOROVOD_TIMELINE_MARK_CYCLES=1 marks cycles);
// hvd.start_timeline()/stop_timeline() start and stop it at run time. The file is a JSON
// array, closed (valid JSON) when the timeline stops or Horovod shuts down; events are
// flushed once per cycle, so a reader sees them while the job runs.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

namespace braid_hvd {

class Timeline {
 public:
  ~Timeline() { stop(); }

  // Returns false (and leaves the timeline as it was) if the file cannot be written.
  bool start(const std::string& path, bool markCycles) {
    std::lock_guard<std::mutex> lk(mu_);
    closeLocked();
    f_ = std::fopen(path.c_str(), "w");
    if (!f_) return false;
    active_ = true;
    markCycles_ = markCycles;
    first_ = true;
    pids_.clear();
    t0_ = std::chrono::steady_clock::now();
    auto epochUs = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    std::fputs("[\n", f_);
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"braid horovod\"}, "
                  "\"start_time_since_epoch_in_micros\": %lld}",
                  static_cast<long long>(epochUs));
    emitLocked(buf);
    return true;
  }

  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    closeLocked();
  }

  bool on() const { return active_; }  // a hint; every writer checks again under the lock

  void begin(const std::string& tensor, const std::string& what) { event(tensor, 'B', what); }
  void end(const std::string& tensor) { event(tensor, 'E', ""); }

  void cycle() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!f_) return;
    if (markCycles_) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "{\"name\": \"CYCLE_START\", \"ph\": \"i\", \"ts\": %lld, \"pid\": 0, \"s\": \"g\"}",
                    static_cast<long long>(nowUs()));
      emitLocked(buf);
    }
    std::fflush(f_);
  }

 private:
  long long nowUs() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
  }

  static std::string quoted(const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", c);
        q += esc;
        continue;
      }
      q += c;
    }
    return q + "\"";
  }

  void event(const std::string& tensor, char phase, const std::string& what) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!f_) return;
    auto it = pids_.find(tensor);
    if (it == pids_.end()) {
      it = pids_.emplace(tensor, static_cast<int>(pids_.size()) + 1).first;
      emitLocked("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(it->second) +
                 ", \"args\": {\"name\": " + quoted(tensor) + "}}");
      emitLocked("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + std::to_string(it->second) +
                 ", \"args\": {\"sort_index\": " + std::to_string(it->second) + "}}");
    }
    std::string e = "{\"ph\": \"";
    e += phase;
    e += "\", \"ts\": " + std::to_string(nowUs()) + ", \"pid\": " + std::to_string(it->second) + ", \"tid\": 0";
    if (!what.empty()) e += ", \"name\": " + quoted(what);
    e += "}";
    emitLocked(e);
  }

  void emitLocked(const std::string& e) {
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
    std::fputs(e.c_str(), f_);
  }

  void closeLocked() {
    if (!f_) return;
    std::fputs("\n]\n", f_);
    std::fclose(f_);
    f_ = nullptr;
    active_ = false;
  }

  std::mutex mu_;
  std::FILE* f_ = nullptr;
  std::atomic<bool> active_{false};
  bool markCycles_ = false;
  bool first_ = true;
  std::chrono::steady_clock::time_point t0_;
  std::unordered_map<std::string, int> pids_;
};

}  // namespace braid_hvd
