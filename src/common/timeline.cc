#include "common/timeline.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace braid::timeline {
namespace detail {
std::atomic<bool> gOn{false};
}

namespace {

// Events held in memory (one JSON object each) until exit; past the cap, later ones are
// counted and dropped, and the trace says how many.
constexpr size_t kMaxEvents = 2000000;

struct State {
  std::mutex mu;
  std::string dir;
  int rank = -1;
  std::vector<std::string> events;
  size_t dropped = 0;
  bool written = false;
};

State& state() {
  static State* s = new State();  // never destroyed: hooks may run during exit
  return *s;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

std::string fileOf(const State& s) {
  return s.dir + "/rank" + std::to_string(s.rank < 0 ? 0 : s.rank) + "-" + std::to_string(getpid()) + ".json";
}

void writeLocked(State& s) {
  // A process that never joined a communicator (braidrun, a tool) leaves no file.
  if (s.dir.empty() || (s.rank < 0 && s.events.empty())) return;
  const std::string file = fileOf(s);
  FILE* f = std::fopen(file.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "braid: BRAID_TIMELINE: cannot write %s: %s\n", file.c_str(), std::strerror(errno));
    return;
  }
  const int pid = s.rank < 0 ? 0 : s.rank;
  std::fprintf(f, "{\"traceEvents\": [\n");
  std::fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d (pid %d)\"}}",
               pid, pid, static_cast<int>(getpid()));
  std::fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"calls\"}}",
               pid, kCallsTid);
  for (const std::string& e : s.events) std::fprintf(f, ",\n%s", e.c_str());
  if (s.dropped)
    std::fprintf(f, ",\n{\"name\": \"%zu events dropped (cap %zu)\", \"ph\": \"i\", \"s\": \"p\", \"pid\": %d, \"ts\": %lld}",
                 s.dropped, kMaxEvents, pid, static_cast<long long>(nowUs()));
  std::fprintf(f, "\n], \"displayTimeUnit\": \"ns\"}\n");
  std::fclose(f);
  s.written = true;
}

void atExit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  writeLocked(s);
}

bool init() {
  const char* v = std::getenv("BRAID_TIMELINE");
  if (!v || !*v) return false;
  State& s = state();
  s.dir = v;
  while (s.dir.size() > 1 && s.dir.back() == '/') s.dir.pop_back();
  mkdir(s.dir.c_str(), 0755);  // may exist already
  struct stat st{};
  if (stat(s.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "braid: BRAID_TIMELINE=%s is not a folder it can write; no timeline\n", v);
    return false;
  }
  std::atexit(atExit);
  return true;
}

const bool gInit = [] {
  detail::gOn.store(init(), std::memory_order_relaxed);
  return true;
}();

}  // namespace

int64_t nowUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void setRank(int rank) {
  if (!on()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.rank < 0) s.rank = rank;
}

void span(const std::string& name, const char* cat, int64_t startUs, int64_t durUs, int tid, const std::string& args) {
  if (!on()) return;
  State& s = state();
  std::ostringstream e;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.events.size() >= kMaxEvents) {
    ++s.dropped;
    return;
  }
  e << "{\"name\": \"" << escape(name) << "\", \"cat\": \"" << cat << "\", \"ph\": \"X\", \"pid\": "
    << (s.rank < 0 ? 0 : s.rank) << ", \"tid\": " << tid << ", \"ts\": " << startUs << ", \"dur\": " << durUs;
  if (!args.empty()) e << ", \"args\": {" << args << "}";
  e << "}";
  s.events.push_back(e.str());
}

void flush() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  writeLocked(s);
}

std::string path() {
  if (!on()) return "";
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return fileOf(s);
}

int64_t merge(const std::string& dir, const std::string& out, std::string* err) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    *err = "cannot read " + dir + ": " + std::strerror(errno);
    return -1;
  }
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0 && dir + "/" + n != out) files.push_back(dir + "/" + n);
  }
  closedir(d);
  if (files.empty()) {
    *err = "no .json trace in " + dir;
    return -1;
  }
  // Each file holds one event per line between the first line and the last (writeLocked).
  std::string body;
  int64_t count = 0;
  for (const std::string& f : files) {
    std::ifstream in(f);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(line);
    if (lines.size() < 2 || lines.front() != "{\"traceEvents\": [") {
      *err = f + " is not a braid timeline";
      return -1;
    }
    for (size_t i = 1; i + 1 < lines.size(); ++i) {
      std::string ev = lines[i];
      if (!ev.empty() && ev.back() == ',') ev.pop_back();
      if (ev.empty()) continue;
      body += (count ? ",\n" : "") + ev;
      ++count;
    }
  }
  FILE* f = std::fopen(out.c_str(), "w");
  if (!f) {
    *err = "cannot write " + out + ": " + std::strerror(errno);
    return -1;
  }
  std::fprintf(f, "{\"traceEvents\": [\n%s\n], \"displayTimeUnit\": \"ns\"}\n", body.c_str());
  std::fclose(f);
  return count;
}

}  // namespace braid::timeline
