// hostId(): BRAID_HOST_ID wins; otherwise hostname and boot id.

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "bootstrap/host_id.h"
#include "support/catch.h"

using namespace braid::bootstrap;

TEST_CASE("hostId honours BRAID_HOST_ID", "[bootstrap][host_id]") {
  auto env = [](const char* name) -> const char* {
    return std::string(name) == "BRAID_HOST_ID" ? "fake-host-3" : nullptr;
  };
  CHECK(hostId(env) == "fake-host-3");

  // Through the real environment too.
  const char* saved = std::getenv("BRAID_HOST_ID");
  std::string savedValue = saved ? saved : "";
  setenv("BRAID_HOST_ID", "from-env", 1);
  CHECK(hostId() == "from-env");
  if (saved) setenv("BRAID_HOST_ID", savedValue.c_str(), 1);
  else unsetenv("BRAID_HOST_ID");
}

TEST_CASE("hostId defaults to hostname and boot id", "[bootstrap][host_id]") {
  auto none = [](const char*) -> const char* { return nullptr; };
  auto empty = [](const char*) -> const char* { return ""; };
  std::string id = hostId(none);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  CHECK(id.rfind(host, 0) == 0);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootLine;
  if (std::getline(boot, bootLine)) {
    CHECK(id == std::string(host) + ":" + bootLine);
    CHECK(bootId() == bootLine);  // the kernel's id alone, without its newline
  }
  CHECK(hostId(empty) == id);  // an empty BRAID_HOST_ID counts as unset
  CHECK(hostId(none) == id);   // stable
}
