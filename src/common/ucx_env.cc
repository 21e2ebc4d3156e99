#include "common/ucx_env.h"

#include <string>

namespace braid {

bool ucxTlsMayUseSharedMemory(const char* tls) {
  if (!tls || !*tls || tls[0] == '^') return true;
  const std::string list = std::string(",") + tls + ",";
  for (const char* shared : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "mm"}) {
    if (list.find(std::string(",") + shared + ",") != std::string::npos) return true;
  }
  return false;
}

}  // namespace braid
