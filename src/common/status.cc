#include "common/status.h"

#include <cstring>

namespace braid {

const char* codeName(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kSystemError: return "system error";
    case Code::kRemoteError: return "remote error";
    case Code::kTimeout: return "timeout";
    case Code::kAborted: return "aborted";
    case Code::kInternal: return "internal error";
    case Code::kWouldBlock: return "would block";
    case Code::kInProgress: return "in progress";
    case Code::kRevoked: return "revoked";
  }
  return "unknown";
}

const std::string& Status::emptyMessage() {
  static const std::string empty;
  return empty;
}

void Status::freeMessage(std::string* msg) { delete msg; }

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(codeName(code_)) + ": " + message();
}

Status systemError(const char* call, int err) {
  return Status(Code::kSystemError, std::string(call) + " failed: " + std::strerror(err));
}

}  // namespace braid
