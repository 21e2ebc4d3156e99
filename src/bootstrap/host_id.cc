#include "bootstrap/host_id.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace braid::bootstrap {

std::string hostId(const std::function<const char*(const char*)>& getenv) {
  if (const char* v = getenv("BRAID_HOST_ID"); v && *v) return v;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string id = host[0] ? host : "unknown-host";
  const std::string boot = bootId();
  if (!boot.empty()) id += ":" + boot;
  return id;
}

std::string bootId() {
  std::string b;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {0};
    if (std::fgets(boot, sizeof(boot), f)) b = boot;
    std::fclose(f);
  }
  while (!b.empty() && (b.back() == '\n' || b.back() == ' ')) b.pop_back();
  return b;
}

std::string hostId() {
  return hostId([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace braid::bootstrap
