#include "common/shm_names.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

namespace braid {

namespace {
constexpr char kPrefix[] = "braid-";

uint64_t random64() {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof v) {
    ssize_t n = getrandom(reinterpret_cast<char*>(&v) + got, sizeof v - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // No getrandom (a very old kernel): the C++ library's source, still not derived from
      // anything a stranger can read.
      std::random_device rd;
      return (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
  }
  return v;
}
}  // namespace

std::string newSegmentName() {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/%s%ld-%016" PRIx64, kPrefix, static_cast<long>(getpid()), random64());
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
