#pragma once
// Status <-> the ABI's result code and error record, for both sides of the plugin boundary
// (the loader in libbraid, the export side in every plugin): one mapping, so a code means
// the same thing whichever way it crosses.

#include <cstdio>
#include <cstring>
#include <string>

#include "braid/transport_plugin.h"
#include "common/status.h"

namespace braid::transport::plugin {

inline braidPluginResult_t resultOf(Code c) {
  switch (c) {
    case Code::kOk: return braidPluginOk;
    case Code::kWouldBlock: return braidPluginWouldBlock;
    case Code::kInvalidArgument: return braidPluginInvalidArgument;
    case Code::kSystemError: return braidPluginSystemError;
    case Code::kRemoteError: return braidPluginRemoteError;
    case Code::kTimeout: return braidPluginTimeout;
    default: return braidPluginInternal;
  }
}

inline Code codeOf(braidPluginResult_t r) {
  switch (r) {
    case braidPluginOk: return Code::kOk;
    case braidPluginWouldBlock: return Code::kWouldBlock;
    case braidPluginInvalidArgument: return Code::kInvalidArgument;
    case braidPluginSystemError: return Code::kSystemError;
    case braidPluginRemoteError: return Code::kRemoteError;
    case braidPluginTimeout: return Code::kTimeout;
    default: return Code::kInternal;
  }
}

inline void fillError(braidPluginError_v1* e, int rank, const std::string& msg) {
  if (!e) return;
  e->rank = rank;
  std::snprintf(e->message, sizeof(e->message), "%s", msg.c_str());
}

// A Status as the ABI returns it: the code, and for a failure the message and rank in `e`.
inline braidPluginResult_t report(const Status& s, braidPluginError_v1* e) {
  if (!s.isOk() && s.code() != Code::kWouldBlock) fillError(e, s.rank(), s.message());
  return resultOf(s.code());
}

// What the other side returned, as a Status; the message is read only up to the record's
// end, in case the writer forgot its terminating NUL.
inline Status statusOf(braidPluginResult_t r, const braidPluginError_v1& e) {
  if (r == braidPluginOk) return Status::ok();
  if (r == braidPluginWouldBlock) return Status(Code::kWouldBlock, "");
  return Status(codeOf(r), std::string(e.message, strnlen(e.message, sizeof(e.message))), e.rank);
}

// An error record ready to be written by the callee.
inline braidPluginError_v1 emptyError() {
  braidPluginError_v1 e;
  e.rank = -1;
  e.message[0] = '\0';
  return e;
}

}  // namespace braid::transport::plugin
