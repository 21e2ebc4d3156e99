// What a rank is handed by its launcher or user: the 128-byte unique id, a store address,
// a job key (src/bootstrap/unique_id.h, launch_env.h, common/auth.h). Properties: nothing
// crashes; an id that decodes re-encodes to the same 128 bytes.

#include <cstring>
#include <string>

#include "bootstrap/launch_env.h"
#include "bootstrap/unique_id.h"
#include "common/auth.h"
#include "fuzz_check.h"

using namespace braid;
using namespace braid::bootstrap;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kUniqueIdBytes) {
    char in[kUniqueIdBytes];
    std::memcpy(in, data, kUniqueIdBytes);
    auto id = decodeUniqueId(in);
    if (id.isOk()) {
      char out[kUniqueIdBytes];
      encodeUniqueId(id.value(), out);
      FUZZ_CHECK(std::memcmp(in, out, kUniqueIdBytes) == 0);
    }
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string host;
  int port = 0;
  if (parseStoreAddress("fuzz", text, &host, &port).isOk()) FUZZ_CHECK(port >= 1 && port <= 65535 && !host.empty());
  auto key = parseAuthKey(text, "fuzz");
  if (key.isOk()) FUZZ_CHECK(key.value().present);
  return 0;
}
