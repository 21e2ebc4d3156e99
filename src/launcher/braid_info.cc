// braid-info: what this build of braid is and how it is configured.
//   braid-info            version, CPU kernels, transports, placement
//   braid-info --config   every environment knob: name, type, default, current value, help

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "braid/braid.h"
#include "core/config.h"
#include "reduce/reduce.h"
#include "topology/placement.h"
#include "transports/transport.h"

namespace {

void printConfig() {
  std::printf("%-24s %-8s %-8s %-16s %s\n", "variable", "type", "default", "current", "help");
  for (const auto& e : braid::core::configTable()) {
    const char* cur = std::getenv(e.name);
    std::printf("%-24s %-8s %-8s %-16s %s\n", e.name, e.type, *e.defaultValue ? e.defaultValue : "-",
                cur ? cur : "-", e.help);
  }
  auto cfg = braid::core::Config::fromEnv();
  if (!cfg.isOk()) {
    std::printf("\nerror: %s\n", cfg.status().toString().c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--config")) {
    printConfig();
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: braid-info [--config]\n");
    return 2;
  }
  std::printf("braid %d.%d.%d\n", BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH);
  std::printf("reduction kernels: %s\n", braid::reduce::simdLevel());
  std::printf("transports:");
  for (const auto& t : braid::transport::registry()) std::printf(" %s", t.name);
  std::printf("\nmachine: %s\n", braid::topology::Placement::local().summary().c_str());
  return 0;
}
