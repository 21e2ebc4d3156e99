#pragma once
// The wire format of braid's TCP store, as pure functions over byte buffers so that every
// decoder can be unit- and fuzz-tested without sockets.
//
// A frame is a fixed 12-byte header followed by a payload:
//
//   header  : magic u32 | protocol version u16 | opcode u16 | payload length u32
//   payload : field count u32 | count x (field length u32 | field bytes)
//
// All integers are little-endian. Integer-valued fields are 8-byte (or 4-byte) fields.
// Every length is checked against what is left of the buffer and against fixed limits
// before anything is allocated, so a hostile peer can make a decoder fail but never read
// out of bounds or allocate more than one frame's worth of memory.
//
// A connection is strictly request/reply: the client sends HELLO first, then one request
// at a time, and the server answers each request with exactly one reply, in order.
//
// Authentication (a store that has the job's key, common/auth.h): the client's HELLO carries
// a 32-byte random challenge; the server answers CHALLENGE with its own challenge and its
// proof of the key over both; the client checks that proof (so a stranger posing as the store
// learns nothing and is found out) and sends AUTH with its own proof; OK admits it. A store
// without a key answers HELLO with OK and ignores the challenge; a client with a key refuses
// such a store. Until admitted a connection may send only these tiny frames.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace braid::bootstrap::proto {

constexpr uint32_t kMagic = 0x53445242;  // "BRDS" as little-endian bytes
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 12;
constexpr uint32_t kMaxPayloadBytes = 64u << 20;  // one frame, values included
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxFields = 1u << 16;  // bounds WAIT/CHECK/MULTI_GET key lists
constexpr size_t kChallengeBytes = 32;
constexpr size_t kProofBytes = 32;
// Sent in place of a relative timeout when the caller has no deadline.
constexpr uint64_t kNoTimeout = ~0ull;

enum class Op : uint16_t {
  // Requests (client to server).
  kHello = 1,     // u32 version, u64 job nonce [, 32-byte client challenge or empty [, u64 client id]]
  kSet = 2,       // key, value
  kGet = 3,       // u64 timeout ms, key
  kAdd = 4,       // key, i64 delta [, u64 request number]: a client with an id (HELLO) that
                  // sends the same number again gets the first answer, not a second add
  kWait = 5,      // u64 timeout ms, key...
  kCheck = 6,     // key...
  kDelete = 7,    // key
  kMultiGet = 8,  // u64 timeout ms, key...
  kAuth = 9,      // 32-byte client proof (after CHALLENGE)
  kCompareSet = 10,  // key, expected, desired: set when the key holds `expected` (absent
                     // counts as ""); the reply is the value it holds afterwards
  kSetOnClose = 11,     // key, value: when this connection ends (for any reason but a
                        // CANCEL_ON_CLOSE of the key), the store sets key to value; OK
  kCancelOnClose = 12,  // key: forget this connection's SET_ON_CLOSE of key; BOOL (was there one)
  kStandby = 13,        // (no fields): sent to a standby store by the store it stands by for;
                        // this connection then mirrors that store's writes, and its end makes
                        // the standby serve; OK
  kFence = 14,          // reason, u64 client id...: every connection of those clients (HELLO's
                        // id) ends as a dead client's does, and they are refused from then on,
                        // told the reason; INT (connections closed)
  // Replies (server to client).
  kOk = 0x81,       // (no fields)
  kValue = 0x82,    // value
  kInt = 0x83,      // i64
  kBool = 0x84,     // u8 (0 or 1)
  kTimeout = 0x85,  // the key still missing when the deadline passed
  kError = 0x86,    // u32 braid::Code, message
  kValues = 0x87,   // value... (MULTI_GET, in key order)
  kChallenge = 0x88,  // 32-byte server challenge, 32-byte server proof (HELLO to a keyed store)
};

bool isRequestOp(uint16_t op);
bool isReplyOp(uint16_t op);
const char* opName(Op op);

struct FrameHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t opcode = 0;
  uint32_t payloadBytes = 0;
};

// A decoded frame: its opcode and raw fields, not yet checked against what the opcode needs.
struct Frame {
  Op op = Op::kOk;
  std::vector<std::string> fields;
};

// The outcome of decoding the start of a byte stream.
struct DecodeResult {
  enum Kind { kFrame, kNeedMore, kMalformed };
  Kind kind = kNeedMore;
  size_t consumed = 0;  // bytes the frame occupied (kFrame only)
  std::string error;    // why the bytes are not a frame (kMalformed only)
};

// Which opcodes a decoder accepts: a server takes requests, a client takes replies.
enum class Direction { kRequest, kReply };

// Appends the encoded frame to `out`. Pure; never fails for fields within the limits (the
// caller is responsible for those; encodeRequest/encodeReply check them).
void encodeFrame(Op op, const std::vector<std::string_view>& fields, std::string* out);

// Parses and validates a header from at least kHeaderBytes at `data`: magic, version,
// opcode for `dir`, and payload length. Pure. Returns false with `error` set if invalid.
bool decodeHeader(const char* data, FrameHeader* header, Direction dir, std::string* error);

// Decodes one frame from the start of `data[0, len)`. kNeedMore when the bytes so far are a
// valid prefix; kMalformed as soon as they cannot be one (a bad header is reported before
// its payload arrives). `out` is written only on kFrame. Pure.
DecodeResult decodeFrame(const char* data, size_t len, Direction dir, Frame* out);

// A request, typed. Which members matter depends on `op` (see Op).
struct Request {
  Op op = Op::kHello;
  uint32_t version = kVersion;  // kHello
  uint64_t nonce = 0;           // kHello
  std::string challenge;        // kHello: empty, or kChallengeBytes from a client with a key
  uint64_t clientId = 0;        // kHello: 0 (none), or the client's id for kAdd's request numbers
  uint64_t requestNumber = 0;   // kAdd: 0 (none), or this add's number from its client
  std::string proof;            // kAuth: kProofBytes
  std::vector<std::string> keys;  // one for kSet/kGet/kAdd/kDelete/kSetOnClose/kCancelOnClose; any number otherwise
  std::string value;            // kSet, kSetOnClose, kFence (the reason); kCompareSet: the desired value
  std::string expected;         // kCompareSet
  int64_t delta = 0;            // kAdd
  std::vector<uint64_t> clients;  // kFence (with the reason in `value`)
  uint64_t timeoutMs = kNoTimeout;  // kGet/kWait/kMultiGet
};

// A reply, typed.
struct Reply {
  Op op = Op::kOk;
  std::string value;                // kValue; the missing key for kTimeout
  std::vector<std::string> values;  // kValues
  int64_t number = 0;               // kInt
  bool flag = false;                // kBool
  Code code = Code::kOk;            // kError
  std::string message;              // kError
  std::string challenge;            // kChallenge: kChallengeBytes
  std::string proof;                // kChallenge: kProofBytes
};

// Checks a decoded frame against what its opcode requires (field count, sizes, key
// lengths) and converts it. kInvalidArgument with the reason otherwise. Pure.
StatusOr<Request> parseRequest(const Frame& frame);
StatusOr<Reply> parseReply(const Frame& frame);

// Appends the encoded request or reply to `out`; kInvalidArgument if a key or the whole
// frame exceeds the limits (nothing is appended then). Pure.
Status encodeRequest(const Request& req, std::string* out);
Status encodeReply(const Reply& rep, std::string* out);

// The encoded size of a frame with fields of these sizes; lets a server check that a reply
// fits before building it.
size_t frameBytes(const std::vector<size_t>& fieldSizes);

}  // namespace braid::bootstrap::proto
