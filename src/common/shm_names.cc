#include "common/shm_names.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/random.h"

namespace braid {

namespace {
constexpr char kPrefix[] = "braid-";
}  // namespace

// Read each time, not kept: a child forked after its parent's unshare(CLONE_NEWPID) is in
// another namespace than the parent that would have kept it.
uint32_t pidNamespaceTag() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0u;
}

std::string newSegmentName() {
  char buf[80];
  std::snprintf(buf, sizeof buf, "/%s%ld-%08" PRIx32 "-%016" PRIx64, kPrefix, static_cast<long>(getpid()),
                pidNamespaceTag(), randomU64());
  return buf;
}

namespace {
// Skips exactly `n` hex digits of `name` from `*i`.
bool hexRun(const std::string& name, size_t* i, size_t n) {
  if (name.size() - *i < n) return false;
  for (size_t end = *i + n; *i < end; ++*i)
    if (!std::isxdigit(static_cast<unsigned char>(name[*i]))) return false;
  return true;
}
}  // namespace

bool isSegmentName(const std::string& name) {
  size_t i = name.size() > 0 && name[0] == '/' ? 1 : 0;
  if (name.compare(i, sizeof kPrefix - 1, kPrefix) != 0) return false;
  i += sizeof kPrefix - 1;
  size_t digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i, ++digits;
  if (digits == 0 || digits > 10 || i >= name.size() || name[i] != '-') return false;
  ++i;
  if (!hexRun(name, &i, 8) || i >= name.size() || name[i] != '-') return false;
  ++i;
  return hexRun(name, &i, 16) && i == name.size();
}

int removeSegmentsOf(pid_t pid, uint32_t ns) {
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "%s%ld-%08" PRIx32 "-", kPrefix, static_cast<long>(pid), ns);
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.compare(0, std::strlen(prefix), prefix) != 0 || !isSegmentName(n)) continue;
    if (shm_unlink(("/" + n).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace braid
