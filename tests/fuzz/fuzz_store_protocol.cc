// The store's wire format (src/bootstrap/store_protocol.h), the bytes a store reads from
// anyone who connects and a client reads from whatever answers. First byte: which side
// decodes (even: the server, requests; odd: the client, replies); the rest is the stream.
// Properties: decoding never reads past the input or allocates beyond a frame; a frame that
// parses re-encodes to bytes that decode to the same frame.

#include <string>

#include "bootstrap/store_protocol.h"
#include "fuzz_check.h"

using namespace braid::bootstrap::proto;

namespace {

std::string reencode(const Frame& f, Direction dir, bool* ok) {
  std::string out;
  *ok = false;
  if (dir == Direction::kRequest) {
    auto req = parseRequest(f);
    if (!req.isOk()) return out;
    FUZZ_CHECK(encodeRequest(req.value(), &out).isOk());
  } else {
    auto rep = parseReply(f);
    if (!rep.isOk()) return out;
    FUZZ_CHECK(encodeReply(rep.value(), &out).isOk());
  }
  *ok = true;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Direction dir = data[0] & 1 ? Direction::kReply : Direction::kRequest;
  const char* p = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  if (left >= kHeaderBytes) {
    FrameHeader h;
    std::string err;
    (void)decodeHeader(p, &h, dir, &err);
  }
  while (left > 0) {
    Frame f;
    DecodeResult r = decodeFrame(p, left, dir, &f);
    if (r.kind != DecodeResult::kFrame) break;
    FUZZ_CHECK(r.consumed >= kHeaderBytes && r.consumed <= left);
    bool ok = false;
    const std::string once = reencode(f, dir, &ok);
    if (ok) {
      Frame g;
      DecodeResult r2 = decodeFrame(once.data(), once.size(), dir, &g);
      FUZZ_CHECK(r2.kind == DecodeResult::kFrame && r2.consumed == once.size());
      bool ok2 = false;
      FUZZ_CHECK(reencode(g, dir, &ok2) == once && ok2);
    }
    p += r.consumed;
    left -= r.consumed;
  }
  return 0;
}
