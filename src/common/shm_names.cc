#include "common/shm_names.h"

#include <dirent.h>
#include <sys/mman.h>
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

std::string newSegmentName() {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/%s%ld-%016" PRIx64, kPrefix, static_cast<long>(getpid()), randomU64());
  return buf;
}

bool isSegmentName(const std::string& name) {
  size_t i = name.size() > 0 && name[0] == '/' ? 1 : 0;
  if (name.compare(i, sizeof kPrefix - 1, kPrefix) != 0) return false;
  i += sizeof kPrefix - 1;
  size_t digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i, ++digits;
  if (digits == 0 || digits > 10 || i >= name.size() || name[i] != '-') return false;
  ++i;
  if (name.size() - i != 16) return false;
  for (; i < name.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

int removeSegmentsOf(pid_t pid) {
  char prefix[48];
  std::snprintf(prefix, sizeof prefix, "%s%ld-", kPrefix, static_cast<long>(pid));
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
