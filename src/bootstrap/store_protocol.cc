#include "bootstrap/store_protocol.h"

#include <cstdio>

namespace braid::bootstrap::proto {

namespace {

// Explicit little-endian byte order so the format does not depend on the host.
void putU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}
void putU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint16_t getU16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
}
uint32_t getU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
std::string u64Field(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
std::string u32Field(uint32_t v) {
  std::string s;
  putU32(&s, v);
  return s;
}

// Reads an integer field of exactly `bytes` bytes; false if the size is wrong.
bool fieldU64(const std::string& f, uint64_t* v) {
  if (f.size() != 8) return false;
  uint64_t x = 0;
  for (int i = 7; i >= 0; --i) x = (x << 8) | static_cast<uint8_t>(f[i]);
  *v = x;
  return true;
}
bool fieldU32(const std::string& f, uint32_t* v) {
  if (f.size() != 4) return false;
  *v = getU32(f.data());
  return true;
}

Status bad(Op op, const std::string& why) {
  return invalidArgument(std::string("malformed ") + opName(op) + " frame: " + why);
}

Status checkKey(Op op, const std::string& key) {
  if (key.empty()) return bad(op, "empty key");
  if (key.size() > kMaxKeyBytes)
    return bad(op, "key of " + std::to_string(key.size()) + " bytes exceeds " + std::to_string(kMaxKeyBytes));
  return Status::ok();
}

Status checkKeys(const Request& req) {
  if (req.keys.size() > kMaxFields - 1)
    return bad(req.op, std::to_string(req.keys.size()) + " keys exceed " + std::to_string(kMaxFields - 1));
  for (const auto& k : req.keys) BRAID_RETURN_IF_ERROR(checkKey(req.op, k));
  return Status::ok();
}

// Appends a frame after checking it fits the payload limit.
Status encodeChecked(Op op, const std::vector<std::string_view>& fields, std::string* out) {
  std::vector<size_t> sizes;
  sizes.reserve(fields.size());
  for (auto f : fields) sizes.push_back(f.size());
  if (fields.size() > kMaxFields) return bad(op, std::to_string(fields.size()) + " fields exceed the limit");
  if (frameBytes(sizes) - kHeaderBytes > kMaxPayloadBytes)
    return bad(op, "payload of " + std::to_string(frameBytes(sizes) - kHeaderBytes) + " bytes exceeds " +
                       std::to_string(kMaxPayloadBytes));
  encodeFrame(op, fields, out);
  return Status::ok();
}

}  // namespace

bool isRequestOp(uint16_t op) { return op >= 1 && op <= 14; }
bool isReplyOp(uint16_t op) { return op >= 0x81 && op <= 0x88; }

const char* opName(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kCompareSet: return "COMPARE_SET";
    case Op::kSetOnClose: return "SET_ON_CLOSE";
    case Op::kCancelOnClose: return "CANCEL_ON_CLOSE";
    case Op::kStandby: return "STANDBY";
    case Op::kFence: return "FENCE";
    case Op::kWait: return "WAIT";
    case Op::kCheck: return "CHECK";
    case Op::kDelete: return "DELETE";
    case Op::kMultiGet: return "MULTI_GET";
    case Op::kAuth: return "AUTH";
    case Op::kOk: return "OK";
    case Op::kValue: return "VALUE";
    case Op::kInt: return "INT";
    case Op::kBool: return "BOOL";
    case Op::kTimeout: return "TIMEOUT";
    case Op::kError: return "ERROR";
    case Op::kValues: return "VALUES";
    case Op::kChallenge: return "CHALLENGE";
  }
  return "UNKNOWN";
}

size_t frameBytes(const std::vector<size_t>& fieldSizes) {
  size_t n = kHeaderBytes + 4;
  for (size_t s : fieldSizes) n += 4 + s;
  return n;
}

void encodeFrame(Op op, const std::vector<std::string_view>& fields, std::string* out) {
  size_t payload = 4;
  for (auto f : fields) payload += 4 + f.size();
  out->reserve(out->size() + kHeaderBytes + payload);
  putU32(out, kMagic);
  putU16(out, kVersion);
  putU16(out, static_cast<uint16_t>(op));
  putU32(out, static_cast<uint32_t>(payload));
  putU32(out, static_cast<uint32_t>(fields.size()));
  for (auto f : fields) {
    putU32(out, static_cast<uint32_t>(f.size()));
    out->append(f.data(), f.size());
  }
}

bool decodeHeader(const char* data, FrameHeader* h, Direction dir, std::string* error) {
  h->magic = getU32(data);
  h->version = getU16(data + 4);
  h->opcode = getU16(data + 6);
  h->payloadBytes = getU32(data + 8);
  if (h->magic != kMagic) {
    char buf[64];
    snprintf(buf, sizeof(buf), "bad magic 0x%08x (want 0x%08x)", h->magic, kMagic);
    *error = buf;
    return false;
  }
  if (h->version != kVersion) {
    *error = "unsupported protocol version " + std::to_string(h->version) + " (this side speaks " +
             std::to_string(kVersion) + ")";
    return false;
  }
  bool known = dir == Direction::kRequest ? isRequestOp(h->opcode) : isReplyOp(h->opcode);
  if (!known) {
    *error = std::string("unknown ") + (dir == Direction::kRequest ? "request" : "reply") + " opcode " +
             std::to_string(h->opcode);
    return false;
  }
  if (h->payloadBytes < 4) {
    *error = "payload of " + std::to_string(h->payloadBytes) + " bytes cannot hold the field count";
    return false;
  }
  if (h->payloadBytes > kMaxPayloadBytes) {
    *error = "payload of " + std::to_string(h->payloadBytes) + " bytes exceeds the limit of " +
             std::to_string(kMaxPayloadBytes);
    return false;
  }
  return true;
}

DecodeResult decodeFrame(const char* data, size_t len, Direction dir, Frame* out) {
  DecodeResult r;
  if (len < kHeaderBytes) {
    // Reject a wrong magic as early as its bytes arrive, so garbage is not buffered.
    uint8_t want[4] = {kMagic & 0xff, (kMagic >> 8) & 0xff, (kMagic >> 16) & 0xff, kMagic >> 24};
    for (size_t i = 0; i < len && i < 4; ++i) {
      if (static_cast<uint8_t>(data[i]) != want[i]) {
        r.kind = DecodeResult::kMalformed;
        r.error = "bad magic";
        return r;
      }
    }
    r.kind = DecodeResult::kNeedMore;
    return r;
  }
  FrameHeader h;
  if (!decodeHeader(data, &h, dir, &r.error)) {
    r.kind = DecodeResult::kMalformed;
    return r;
  }
  const size_t total = kHeaderBytes + h.payloadBytes;
  if (len < total) {
    r.kind = DecodeResult::kNeedMore;
    return r;
  }
  const char* p = data + kHeaderBytes;
  const char* end = data + total;
  uint32_t count = getU32(p);
  p += 4;
  // Every field needs at least its 4-byte length: this bounds `count` by the payload.
  if (count > kMaxFields || static_cast<size_t>(count) * 4 > static_cast<size_t>(end - p)) {
    r.kind = DecodeResult::kMalformed;
    r.error = "field count " + std::to_string(count) + " does not fit a payload of " +
              std::to_string(h.payloadBytes) + " bytes";
    return r;
  }
  std::vector<std::string> fields;
  fields.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (end - p < 4) {
      r.kind = DecodeResult::kMalformed;
      r.error = "field " + std::to_string(i) + " length runs past the frame";
      return r;
    }
    uint32_t flen = getU32(p);
    p += 4;
    if (flen > static_cast<size_t>(end - p)) {
      r.kind = DecodeResult::kMalformed;
      r.error = "field " + std::to_string(i) + " of " + std::to_string(flen) + " bytes runs past the frame (" +
                std::to_string(end - p) + " bytes left)";
      return r;
    }
    fields.emplace_back(p, flen);
    p += flen;
  }
  if (p != end) {
    r.kind = DecodeResult::kMalformed;
    r.error = std::to_string(end - p) + " trailing bytes after the last field";
    return r;
  }
  out->op = static_cast<Op>(h.opcode);
  out->fields = std::move(fields);
  r.kind = DecodeResult::kFrame;
  r.consumed = total;
  return r;
}

StatusOr<Request> parseRequest(const Frame& f) {
  Request req;
  req.op = f.op;
  const auto& fs = f.fields;
  auto wantFields = [&](size_t n) -> Status {
    if (fs.size() != n)
      return bad(f.op, "expected " + std::to_string(n) + " fields, got " + std::to_string(fs.size()));
    return Status::ok();
  };
  switch (f.op) {
    case Op::kHello:
      if (fs.size() < 2 || fs.size() > 4)
        return bad(f.op, "expected 2 to 4 fields, got " + std::to_string(fs.size()));
      if (!fieldU32(fs[0], &req.version)) return bad(f.op, "version field is not 4 bytes");
      if (!fieldU64(fs[1], &req.nonce)) return bad(f.op, "nonce field is not 8 bytes");
      if (fs.size() >= 3) {
        // Empty only as a place holder before a client id.
        if (fs[2].size() != kChallengeBytes && !(fs[2].empty() && fs.size() == 4))
          return bad(f.op, "challenge field is not 32 bytes");
        req.challenge = fs[2];
      }
      if (fs.size() == 4 && !fieldU64(fs[3], &req.clientId)) return bad(f.op, "client id field is not 8 bytes");
      return req;
    case Op::kAuth:
      BRAID_RETURN_IF_ERROR(wantFields(1));
      if (fs[0].size() != kProofBytes) return bad(f.op, "proof field is not 32 bytes");
      req.proof = fs[0];
      return req;
    case Op::kSet:
    case Op::kSetOnClose:
      BRAID_RETURN_IF_ERROR(wantFields(2));
      BRAID_RETURN_IF_ERROR(checkKey(f.op, fs[0]));
      req.keys = {fs[0]};
      req.value = fs[1];
      return req;
    case Op::kGet:
      BRAID_RETURN_IF_ERROR(wantFields(2));
      if (!fieldU64(fs[0], &req.timeoutMs)) return bad(f.op, "timeout field is not 8 bytes");
      BRAID_RETURN_IF_ERROR(checkKey(f.op, fs[1]));
      req.keys = {fs[1]};
      return req;
    case Op::kAdd: {
      if (fs.size() != 2 && fs.size() != 3)
        return bad(f.op, "expected 2 or 3 fields, got " + std::to_string(fs.size()));
      BRAID_RETURN_IF_ERROR(checkKey(f.op, fs[0]));
      uint64_t d;
      if (!fieldU64(fs[1], &d)) return bad(f.op, "delta field is not 8 bytes");
      if (fs.size() == 3 && !fieldU64(fs[2], &req.requestNumber)) return bad(f.op, "request number field is not 8 bytes");
      req.keys = {fs[0]};
      req.delta = static_cast<int64_t>(d);
      return req;
    }
    case Op::kStandby:
      BRAID_RETURN_IF_ERROR(wantFields(0));
      return req;
    case Op::kFence:
      if (fs.size() < 2) return bad(f.op, "expected a reason and at least one client id");
      req.value = fs[0];
      for (size_t i = 1; i < fs.size(); ++i) {
        uint64_t id = 0;
        if (!fieldU64(fs[i], &id)) return bad(f.op, "client id field is not 8 bytes");
        req.clients.push_back(id);
      }
      return req;
    case Op::kWait:
    case Op::kMultiGet:
      if (fs.empty()) return bad(f.op, "missing timeout field");
      if (!fieldU64(fs[0], &req.timeoutMs)) return bad(f.op, "timeout field is not 8 bytes");
      req.keys.assign(fs.begin() + 1, fs.end());
      BRAID_RETURN_IF_ERROR(checkKeys(req));
      return req;
    case Op::kCheck:
      req.keys = fs;
      BRAID_RETURN_IF_ERROR(checkKeys(req));
      return req;
    case Op::kDelete:
    case Op::kCancelOnClose:
      BRAID_RETURN_IF_ERROR(wantFields(1));
      BRAID_RETURN_IF_ERROR(checkKey(f.op, fs[0]));
      req.keys = {fs[0]};
      return req;
    case Op::kCompareSet:
      BRAID_RETURN_IF_ERROR(wantFields(3));
      BRAID_RETURN_IF_ERROR(checkKey(f.op, fs[0]));
      req.keys = {fs[0]};
      req.expected = fs[1];
      req.value = fs[2];
      return req;
    default:
      return bad(f.op, "not a request opcode");
  }
}

StatusOr<Reply> parseReply(const Frame& f) {
  Reply rep;
  rep.op = f.op;
  const auto& fs = f.fields;
  auto wantFields = [&](size_t n) -> Status {
    if (fs.size() != n)
      return bad(f.op, "expected " + std::to_string(n) + " fields, got " + std::to_string(fs.size()));
    return Status::ok();
  };
  switch (f.op) {
    case Op::kOk:
      BRAID_RETURN_IF_ERROR(wantFields(0));
      return rep;
    case Op::kValue:
    case Op::kTimeout:
      BRAID_RETURN_IF_ERROR(wantFields(1));
      rep.value = fs[0];
      return rep;
    case Op::kValues:
      rep.values = fs;
      return rep;
    case Op::kChallenge:
      BRAID_RETURN_IF_ERROR(wantFields(2));
      if (fs[0].size() != kChallengeBytes) return bad(f.op, "challenge field is not 32 bytes");
      if (fs[1].size() != kProofBytes) return bad(f.op, "proof field is not 32 bytes");
      rep.challenge = fs[0];
      rep.proof = fs[1];
      return rep;
    case Op::kInt: {
      BRAID_RETURN_IF_ERROR(wantFields(1));
      uint64_t v;
      if (!fieldU64(fs[0], &v)) return bad(f.op, "integer field is not 8 bytes");
      rep.number = static_cast<int64_t>(v);
      return rep;
    }
    case Op::kBool:
      BRAID_RETURN_IF_ERROR(wantFields(1));
      if (fs[0].size() != 1 || static_cast<uint8_t>(fs[0][0]) > 1) return bad(f.op, "flag field is not one 0/1 byte");
      rep.flag = fs[0][0] == 1;
      return rep;
    case Op::kError: {
      BRAID_RETURN_IF_ERROR(wantFields(2));
      uint32_t c;
      if (!fieldU32(fs[0], &c)) return bad(f.op, "code field is not 4 bytes");
      // Only failure codes travel: anything else would make an error look like success.
      if (c == 0 || c > static_cast<uint32_t>(Code::kRevoked)) return bad(f.op, "code " + std::to_string(c) + " is not an error code");
      rep.code = static_cast<Code>(c);
      rep.message = fs[1];
      return rep;
    }
    default:
      return bad(f.op, "not a reply opcode");
  }
}

Status encodeRequest(const Request& req, std::string* out) {
  std::vector<std::string> owned;  // integer fields, kept alive for the views below
  std::vector<std::string_view> fields;
  auto needOneKey = [&]() -> Status {
    if (req.keys.size() != 1) return bad(req.op, "needs exactly one key");
    return checkKey(req.op, req.keys[0]);
  };
  owned.reserve(4);  // never reallocated: `fields` points into it
  switch (req.op) {
    case Op::kHello:
      owned.push_back(u32Field(req.version));
      owned.push_back(u64Field(req.nonce));
      owned.push_back(u64Field(req.clientId));
      fields = {owned[0], owned[1]};
      if (!req.challenge.empty() && req.challenge.size() != kChallengeBytes)
        return bad(req.op, "challenge must be 32 bytes");
      if (!req.challenge.empty() || req.clientId != 0) fields.push_back(req.challenge);
      if (req.clientId != 0) fields.push_back(owned[2]);
      break;
    case Op::kAuth:
      if (req.proof.size() != kProofBytes) return bad(req.op, "proof must be 32 bytes");
      fields = {req.proof};
      break;
    case Op::kSet:
    case Op::kSetOnClose:
      BRAID_RETURN_IF_ERROR(needOneKey());
      fields = {req.keys[0], req.value};
      break;
    case Op::kGet:
      BRAID_RETURN_IF_ERROR(needOneKey());
      owned.push_back(u64Field(req.timeoutMs));
      fields = {owned[0], req.keys[0]};
      break;
    case Op::kAdd:
      BRAID_RETURN_IF_ERROR(needOneKey());
      owned.push_back(u64Field(static_cast<uint64_t>(req.delta)));
      owned.push_back(u64Field(req.requestNumber));
      fields = {req.keys[0], owned[0]};
      if (req.requestNumber != 0) fields.push_back(owned[1]);
      break;
    case Op::kStandby:
      break;
    case Op::kFence:
      if (req.clients.empty()) return bad(req.op, "needs at least one client id");
      if (req.clients.size() > kMaxFields - 1)
        return bad(req.op, std::to_string(req.clients.size()) + " client ids exceed " + std::to_string(kMaxFields - 1));
      owned.reserve(req.clients.size());
      for (uint64_t id : req.clients) owned.push_back(u64Field(id));
      fields.push_back(req.value);
      for (const auto& o : owned) fields.push_back(o);
      break;
    case Op::kWait:
    case Op::kMultiGet:
      BRAID_RETURN_IF_ERROR(checkKeys(req));
      owned.push_back(u64Field(req.timeoutMs));
      fields.push_back(owned[0]);
      for (const auto& k : req.keys) fields.push_back(k);
      break;
    case Op::kCheck:
      BRAID_RETURN_IF_ERROR(checkKeys(req));
      for (const auto& k : req.keys) fields.push_back(k);
      break;
    case Op::kDelete:
    case Op::kCancelOnClose:
      BRAID_RETURN_IF_ERROR(needOneKey());
      fields = {req.keys[0]};
      break;
    case Op::kCompareSet:
      BRAID_RETURN_IF_ERROR(needOneKey());
      fields = {req.keys[0], req.expected, req.value};
      break;
    default:
      return bad(req.op, "not a request opcode");
  }
  return encodeChecked(req.op, fields, out);
}

Status encodeReply(const Reply& rep, std::string* out) {
  std::vector<std::string> owned;
  std::vector<std::string_view> fields;
  owned.reserve(1);
  switch (rep.op) {
    case Op::kOk:
      break;
    case Op::kValue:
    case Op::kTimeout:
      fields = {rep.value};
      break;
    case Op::kValues:
      for (const auto& v : rep.values) fields.push_back(v);
      break;
    case Op::kChallenge:
      if (rep.challenge.size() != kChallengeBytes || rep.proof.size() != kProofBytes)
        return bad(rep.op, "challenge and proof must be 32 bytes each");
      fields = {rep.challenge, rep.proof};
      break;
    case Op::kInt:
      owned.push_back(u64Field(static_cast<uint64_t>(rep.number)));
      fields = {owned[0]};
      break;
    case Op::kBool:
      owned.push_back(std::string(1, rep.flag ? '\1' : '\0'));
      fields = {owned[0]};
      break;
    case Op::kError:
      owned.push_back(u32Field(static_cast<uint32_t>(rep.code)));
      fields = {owned[0], rep.message};
      break;
    default:
      return bad(rep.op, "not a reply opcode");
  }
  return encodeChecked(rep.op, fields, out);
}

}  // namespace braid::bootstrap::proto
