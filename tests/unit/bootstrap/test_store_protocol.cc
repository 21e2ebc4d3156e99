// The store's wire format as pure functions: round trips, and every malformed input the
// decoder must reject (crafted byte buffers and seeded random mutations).

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::bootstrap::proto;

namespace {

void putU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void putU16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xff));
  s->push_back(static_cast<char>(v >> 8));
}

// A header with arbitrary values, for crafting bad frames.
std::string header(uint32_t magic, uint16_t version, uint16_t op, uint32_t payload) {
  std::string s;
  putU32(&s, magic);
  putU16(&s, version);
  putU16(&s, op);
  putU32(&s, payload);
  return s;
}

// A payload of raw fields (count, then length-prefixed fields).
std::string payload(const std::vector<std::string>& fields) {
  std::string s;
  putU32(&s, static_cast<uint32_t>(fields.size()));
  for (const auto& f : fields) {
    putU32(&s, static_cast<uint32_t>(f.size()));
    s += f;
  }
  return s;
}

std::string frame(Op op, const std::vector<std::string>& fields) {
  std::string p = payload(fields);
  return header(kMagic, kVersion, static_cast<uint16_t>(op), static_cast<uint32_t>(p.size())) + p;
}

DecodeResult decodeReq(const std::string& bytes, Frame* f) {
  return decodeFrame(bytes.data(), bytes.size(), Direction::kRequest, f);
}

std::string u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

Request roundTrip(const Request& in) {
  std::string bytes;
  REQUIRE(encodeRequest(in, &bytes).isOk());
  Frame f;
  DecodeResult r = decodeReq(bytes, &f);
  REQUIRE(r.kind == DecodeResult::kFrame);
  REQUIRE(r.consumed == bytes.size());
  auto req = parseRequest(f);
  REQUIRE(req.isOk());
  return req.value();
}

Reply roundTrip(const Reply& in) {
  std::string bytes;
  REQUIRE(encodeReply(in, &bytes).isOk());
  Frame f;
  DecodeResult r = decodeFrame(bytes.data(), bytes.size(), Direction::kReply, &f);
  REQUIRE(r.kind == DecodeResult::kFrame);
  REQUIRE(r.consumed == bytes.size());
  auto rep = parseReply(f);
  REQUIRE(rep.isOk());
  return rep.value();
}

}  // namespace

TEST_CASE("protocol: requests round trip", "[bootstrap][protocol]") {
  Request hello;
  hello.op = Op::kHello;
  hello.nonce = 0x0123456789abcdefull;
  Request h = roundTrip(hello);
  CHECK(h.op == Op::kHello);
  CHECK(h.version == kVersion);
  CHECK(h.nonce == 0x0123456789abcdefull);

  Request set;
  set.op = Op::kSet;
  set.keys = {"key"};
  set.value = std::string("v\0al", 4);
  Request s = roundTrip(set);
  CHECK(s.keys == std::vector<std::string>{"key"});
  CHECK(s.value == std::string("v\0al", 4));

  Request get;
  get.op = Op::kGet;
  get.keys = {"g"};
  get.timeoutMs = 1234;
  CHECK(roundTrip(get).timeoutMs == 1234);
  get.timeoutMs = kNoTimeout;
  CHECK(roundTrip(get).timeoutMs == kNoTimeout);

  Request add;
  add.op = Op::kAdd;
  add.keys = {"a"};
  add.delta = -42;
  CHECK(roundTrip(add).delta == -42);

  for (Op op : {Op::kWait, Op::kMultiGet, Op::kCheck}) {
    Request w;
    w.op = op;
    w.keys = {"a", "b", "c"};
    w.timeoutMs = 7;
    Request r = roundTrip(w);
    CHECK(r.keys == w.keys);
    if (op != Op::kCheck) CHECK(r.timeoutMs == 7);
  }

  Request del;
  del.op = Op::kDelete;
  del.keys = {"d"};
  CHECK(roundTrip(del).keys == std::vector<std::string>{"d"});

  Request cas;
  cas.op = Op::kCompareSet;
  cas.keys = {"c"};
  cas.expected = "";
  cas.value = std::string("v\0w", 3);
  Request back = roundTrip(cas);
  CHECK(back.keys == std::vector<std::string>{"c"});
  CHECK(back.expected.empty());
  CHECK(back.value == cas.value);

  Request onClose;
  onClose.op = Op::kSetOnClose;
  onClose.keys = {"job/gone/7"};
  onClose.value = "1";
  Request oc = roundTrip(onClose);
  CHECK(oc.op == Op::kSetOnClose);
  CHECK(oc.keys == std::vector<std::string>{"job/gone/7"});
  CHECK(oc.value == "1");
  Request cancel;
  cancel.op = Op::kCancelOnClose;
  cancel.keys = {"job/gone/7"};
  CHECK(roundTrip(cancel).keys == std::vector<std::string>{"job/gone/7"});

  // A client id, with or without a challenge before it; a numbered add; STANDBY.
  hello.clientId = 0xabcdef0123ull;
  h = roundTrip(hello);
  CHECK(h.clientId == 0xabcdef0123ull);
  CHECK(h.challenge.empty());
  hello.challenge = std::string(kChallengeBytes, 'c');
  h = roundTrip(hello);
  CHECK(h.clientId == 0xabcdef0123ull);
  CHECK(h.challenge == hello.challenge);
  add.requestNumber = 99;
  Request numbered = roundTrip(add);
  CHECK(numbered.requestNumber == 99);
  CHECK(numbered.delta == -42);
  add.requestNumber = 0;
  CHECK(roundTrip(add).requestNumber == 0);
  Request standby;
  standby.op = Op::kStandby;
  CHECK(roundTrip(standby).op == Op::kStandby);
  Request fence;
  fence.op = Op::kFence;
  fence.value = "left out";
  fence.clients = {7, 0xfeedfacecafebeefull};
  Request f = roundTrip(fence);
  CHECK(f.value == "left out");
  CHECK(f.clients == fence.clients);
  std::string bytes;
  fence.clients.clear();
  CHECK_FALSE(encodeRequest(fence, &bytes).isOk());  // nobody to fence
}

TEST_CASE("protocol: replies round trip", "[bootstrap][protocol]") {
  Reply ok;
  CHECK(roundTrip(ok).op == Op::kOk);
  Reply v;
  v.op = Op::kValue;
  v.value = "hello";
  CHECK(roundTrip(v).value == "hello");
  Reply n;
  n.op = Op::kInt;
  n.number = INT64_MIN;
  CHECK(roundTrip(n).number == INT64_MIN);
  Reply b;
  b.op = Op::kBool;
  b.flag = true;
  CHECK(roundTrip(b).flag);
  Reply t;
  t.op = Op::kTimeout;
  t.value = "missing";
  CHECK(roundTrip(t).value == "missing");
  Reply e;
  e.op = Op::kError;
  e.code = Code::kInvalidArgument;
  e.message = "nope";
  Reply e2 = roundTrip(e);
  CHECK(e2.code == Code::kInvalidArgument);
  CHECK(e2.message == "nope");
  Reply vs;
  vs.op = Op::kValues;
  vs.values = {"a", "", "c"};
  CHECK(roundTrip(vs).values == vs.values);
}

TEST_CASE("protocol: incomplete frames need more bytes, byte by byte", "[bootstrap][protocol]") {
  Request set;
  set.op = Op::kSet;
  set.keys = {"key"};
  set.value = "value";
  std::string bytes;
  REQUIRE(encodeRequest(set, &bytes).isOk());
  for (size_t n = 0; n < bytes.size(); ++n) {
    Frame f;
    f.op = Op::kValues;  // must stay untouched
    DecodeResult r = decodeFrame(bytes.data(), n, Direction::kRequest, &f);
    INFO("prefix " << n);
    CHECK(r.kind == DecodeResult::kNeedMore);
    CHECK(f.op == Op::kValues);
  }
  // Two frames back to back decode one at a time.
  std::string two = bytes + bytes;
  Frame f;
  DecodeResult r = decodeReq(two, &f);
  REQUIRE(r.kind == DecodeResult::kFrame);
  CHECK(r.consumed == bytes.size());
}

TEST_CASE("protocol: malformed headers are rejected before their payload arrives", "[bootstrap][protocol]") {
  Frame f;
  SECTION("bad magic, even from the first byte") {
    DecodeResult r = decodeReq(header(0xdeadbeef, kVersion, 2, 4), &f);
    CHECK(r.kind == DecodeResult::kMalformed);
    CHECK(r.error.find("magic") != std::string::npos);
    CHECK(decodeReq("X", &f).kind == DecodeResult::kMalformed);
    CHECK(decodeReq("GET /", &f).kind == DecodeResult::kMalformed);  // an HTTP client
  }
  SECTION("bad version") {
    DecodeResult r = decodeReq(header(kMagic, kVersion + 1, 2, 4), &f);
    CHECK(r.kind == DecodeResult::kMalformed);
    CHECK(r.error.find("version") != std::string::npos);
  }
  SECTION("unknown opcode") {
    for (uint16_t op : {0, 15, 99, 0x80, 0x89, 0xffff}) {
      DecodeResult r = decodeReq(header(kMagic, kVersion, op, 4), &f);
      INFO("op " << op);
      CHECK(r.kind == DecodeResult::kMalformed);
      CHECK(r.error.find("opcode") != std::string::npos);
    }
  }
  SECTION("a reply opcode is not a request, and a request opcode is not a reply") {
    CHECK(decodeReq(header(kMagic, kVersion, 0x81, 4), &f).kind == DecodeResult::kMalformed);
    std::string req = header(kMagic, kVersion, 2, 4);
    CHECK(decodeFrame(req.data(), req.size(), Direction::kReply, &f).kind == DecodeResult::kMalformed);
  }
  SECTION("oversized payload length") {
    DecodeResult r = decodeReq(header(kMagic, kVersion, 2, kMaxPayloadBytes + 1), &f);
    CHECK(r.kind == DecodeResult::kMalformed);
    CHECK(r.error.find("exceeds") != std::string::npos);
    CHECK(decodeReq(header(kMagic, kVersion, 2, 0xffffffffu), &f).kind == DecodeResult::kMalformed);
  }
  SECTION("payload too short for its field count") {
    CHECK(decodeReq(header(kMagic, kVersion, 2, 0), &f).kind == DecodeResult::kMalformed);
    CHECK(decodeReq(header(kMagic, kVersion, 2, 3) + "abc", &f).kind == DecodeResult::kMalformed);
  }
}

TEST_CASE("protocol: malformed payloads", "[bootstrap][protocol]") {
  Frame f;
  SECTION("field length beyond the frame") {
    std::string p;
    putU32(&p, 1);
    putU32(&p, 1000);  // but only 3 bytes follow
    p += "abc";
    std::string bytes = header(kMagic, kVersion, 2, static_cast<uint32_t>(p.size())) + p;
    DecodeResult r = decodeReq(bytes, &f);
    CHECK(r.kind == DecodeResult::kMalformed);
    CHECK(r.error.find("runs past") != std::string::npos);
  }
  SECTION("field length of 0xffffffff does not wrap") {
    std::string p;
    putU32(&p, 2);
    putU32(&p, 0xffffffffu);
    p += "abcd";
    std::string bytes = header(kMagic, kVersion, 2, static_cast<uint32_t>(p.size())) + p;
    CHECK(decodeReq(bytes, &f).kind == DecodeResult::kMalformed);
  }
  SECTION("field count beyond the payload") {
    std::string p;
    putU32(&p, 1000000);
    std::string bytes = header(kMagic, kVersion, 6, static_cast<uint32_t>(p.size())) + p;
    DecodeResult r = decodeReq(bytes, &f);
    CHECK(r.kind == DecodeResult::kMalformed);
    CHECK(r.error.find("field count") != std::string::npos);
  }
  SECTION("a field's length prefix cut off by the frame end") {
    std::string p;
    putU32(&p, 2);
    putU32(&p, 0);
    p += "ab";  // half of the second length
    std::string bytes = header(kMagic, kVersion, 6, static_cast<uint32_t>(p.size())) + p;
    CHECK(decodeReq(bytes, &f).kind == DecodeResult::kMalformed);
  }
  SECTION("trailing bytes after the last field") {
    std::string p = payload({"k", "v"}) + "junk";
    std::string bytes = header(kMagic, kVersion, 2, static_cast<uint32_t>(p.size())) + p;
    DecodeResult r = decodeReq(bytes, &f);
    CHECK(r.kind == DecodeResult::kMalformed);
    CHECK(r.error.find("trailing") != std::string::npos);
  }
}

TEST_CASE("protocol: well-formed frames with the wrong fields for their opcode", "[bootstrap][protocol]") {
  auto parse = [](const std::string& bytes) {
    Frame f;
    DecodeResult r = decodeReq(bytes, &f);
    REQUIRE(r.kind == DecodeResult::kFrame);
    return parseRequest(f);
  };
  CHECK(parse(frame(Op::kSet, {"only-key"})).status().code() == Code::kInvalidArgument);
  CHECK(parse(frame(Op::kSet, {"", "v"})).status().message().find("empty key") != std::string::npos);
  CHECK(parse(frame(Op::kSet, {std::string(kMaxKeyBytes + 1, 'k'), "v"})).status().message().find("exceeds") !=
        std::string::npos);
  CHECK(parse(frame(Op::kSet, {std::string(kMaxKeyBytes, 'k'), "v"})).isOk());
  CHECK_FALSE(parse(frame(Op::kHello, {"1234", "short"})).isOk());
  CHECK_FALSE(parse(frame(Op::kHello, {"12", u64(1)})).isOk());
  CHECK_FALSE(parse(frame(Op::kGet, {"k", u64(1)})).isOk());  // fields swapped
  CHECK_FALSE(parse(frame(Op::kAdd, {"k", "1"})).isOk());     // delta as text
  CHECK_FALSE(parse(frame(Op::kWait, {})).isOk());
  CHECK(parse(frame(Op::kWait, {u64(5)})).isOk());  // waiting on no keys is fine
  CHECK_FALSE(parse(frame(Op::kDelete, {"a", "b"})).isOk());
  CHECK_FALSE(parse(frame(Op::kCompareSet, {"k", "expected"})).isOk());  // the desired value missing
  CHECK_FALSE(parse(frame(Op::kSetOnClose, {"k"})).isOk());                // the value missing
  CHECK_FALSE(parse(frame(Op::kSetOnClose, {"", "1"})).isOk());
  CHECK_FALSE(parse(frame(Op::kCancelOnClose, {"k", "extra"})).isOk());
  const std::string ver = std::string("\1\0\0\0", 4);
  CHECK_FALSE(parse(frame(Op::kHello, {ver, u64(1), "", "short"})).isOk());         // client id not 8 bytes
  CHECK_FALSE(parse(frame(Op::kHello, {ver, u64(1), "xyz", u64(5)})).isOk());       // challenge neither 32 nor empty
  CHECK_FALSE(parse(frame(Op::kHello, {ver, u64(1), ""})).isOk());                  // empty challenge, no id after it
  CHECK_FALSE(parse(frame(Op::kHello, {ver, u64(1), "", u64(5), u64(6)})).isOk());  // five fields
  CHECK(parse(frame(Op::kHello, {ver, u64(1), "", u64(5)})).value().clientId == 5);
  CHECK_FALSE(parse(frame(Op::kAdd, {"k", u64(1), "7"})).isOk());  // request number as text
  CHECK_FALSE(parse(frame(Op::kStandby, {"x"})).isOk());
  CHECK_FALSE(parse(frame(Op::kFence, {"why"})).isOk());            // no client id
  CHECK_FALSE(parse(frame(Op::kFence, {"why", u64(1), "7"})).isOk());  // a client id as text
  CHECK(parse(frame(Op::kFence, {"why", u64(1), u64(2)})).value().clients.size() == 2u);

  auto parseRep = [](const std::string& p, Op op) {
    std::string bytes = header(kMagic, kVersion, static_cast<uint16_t>(op), static_cast<uint32_t>(p.size())) + p;
    Frame f;
    DecodeResult r = decodeFrame(bytes.data(), bytes.size(), Direction::kReply, &f);
    REQUIRE(r.kind == DecodeResult::kFrame);
    return parseReply(f);
  };
  CHECK_FALSE(parseRep(payload({"x"}), Op::kOk).isOk());
  CHECK_FALSE(parseRep(payload({"\2"}), Op::kBool).isOk());
  CHECK_FALSE(parseRep(payload({"123"}), Op::kInt).isOk());
  std::string okCode;
  putU32(&okCode, 0);
  CHECK_FALSE(parseRep(payload({okCode, "not an error"}), Op::kError).isOk());  // an error must not read as success
}

TEST_CASE("protocol: encoders refuse what decoders would reject", "[bootstrap][protocol]") {
  std::string out;
  Request r;
  r.op = Op::kSet;
  r.keys = {std::string(kMaxKeyBytes + 1, 'k')};
  CHECK(encodeRequest(r, &out).code() == Code::kInvalidArgument);
  r.keys = {};
  CHECK(encodeRequest(r, &out).code() == Code::kInvalidArgument);
  r.keys = {"k"};
  r.value = std::string(kMaxPayloadBytes, 'v');  // the value alone fills the frame
  CHECK(encodeRequest(r, &out).code() == Code::kInvalidArgument);
  CHECK(out.empty());  // nothing appended on failure
  Request bad;
  bad.op = Op::kOk;
  CHECK(encodeRequest(bad, &out).code() == Code::kInvalidArgument);
  Reply badRep;
  badRep.op = Op::kGet;
  CHECK(encodeReply(badRep, &out).code() == Code::kInvalidArgument);
}

TEST_CASE("protocol: seeded random mutations never crash the decoder", "[bootstrap][protocol][fuzz]") {
  std::mt19937_64 rng(0xb4a1d);
  std::vector<std::string> seeds;
  {
    Request req;
    req.op = Op::kHello;
    req.nonce = 7;
    (void)encodeRequest(req, &seeds.emplace_back());
    req.op = Op::kSet;
    req.keys = {"some/key"};
    req.value = "some value";
    (void)encodeRequest(req, &seeds.emplace_back());
    req.op = Op::kMultiGet;
    req.keys = {"a", "bb", "ccc"};
    (void)encodeRequest(req, &seeds.emplace_back());
    req.op = Op::kAdd;
    req.keys = {"ctr"};
    (void)encodeRequest(req, &seeds.emplace_back());
  }
  int frames = 0, malformed = 0, needMore = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::string bytes = seeds[rng() % seeds.size()];
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      switch (rng() % 4) {
        case 0: bytes[rng() % bytes.size()] = static_cast<char>(rng()); break;
        case 1: bytes.resize(rng() % (bytes.size() + 1)); break;
        case 2: bytes.insert(rng() % (bytes.size() + 1), 1, static_cast<char>(rng())); break;
        case 3:
          if (bytes.size() >= 4) {  // a length field set to something extreme
            uint32_t v = rng() % 2 ? 0xffffffffu : static_cast<uint32_t>(rng() % 64);
            size_t at = rng() % (bytes.size() - 3);
            std::memcpy(&bytes[at], &v, 4);
          }
          break;
      }
      if (bytes.empty()) bytes = "x";
    }
    Frame f;
    DecodeResult r = decodeReq(bytes, &f);
    if (r.kind == DecodeResult::kFrame) {
      ++frames;
      REQUIRE(r.consumed <= bytes.size());
      (void)parseRequest(f);  // may fail, must not crash
    } else if (r.kind == DecodeResult::kMalformed) {
      ++malformed;
      REQUIRE_FALSE(r.error.empty());
    } else {
      ++needMore;
    }
  }
  // The mutations reach every outcome, so the loop exercised each decoder path.
  CHECK(frames > 0);
  CHECK(malformed > 0);
  CHECK(needMore > 0);
}
