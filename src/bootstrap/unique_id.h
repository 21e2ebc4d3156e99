#pragma once
// braid's unique id (braidUniqueId): 128 opaque bytes that carry everything a rank needs to
// join a job created with braidGetUniqueId: where the store is, the job's session nonce,
// which the store checks in every client's HELLO, and the job's key (common/auth.h), which
// every store and tcp connection of the job must prove. The id is therefore a secret: share
// it only with the job's ranks (an MPI broadcast, a file only the user reads), as NCCL's.
//
// Layout (little-endian):
//   [0, 4)     magic "BRID"
//   [4, 6)     format version
//   [6, 8)     store port
//   [8, 16)    session nonce
//   [16, 48)   job key (32 bytes)
//   [48]       host length n (1..kUniqueIdMaxHost)
//   [49, 49+n) host bytes (IPv4 literal or host name), then zeros
//   [124, 128) FNV-1a checksum of bytes [0, 124)
// A grow id (braidCommGetGrowId) has the magic "BRIG", a host of at most kGrowIdMaxHost
// bytes, its single-use token at [116, 124), and may carry a zero nonce or key (the store of
// a job without them).
// The checksum catches ids truncated or mangled on their way between processes (an MPI
// broadcast of the wrong size, a string copy that stopped at a zero byte).

#include <cstdint>
#include <string>

#include "common/auth.h"
#include "common/status.h"

namespace braid::bootstrap {

constexpr size_t kUniqueIdBytes = 128;
constexpr size_t kUniqueIdMaxHost = 75;
constexpr size_t kGrowIdMaxHost = 67;

// The nonce of a grow id whose store is an etcd cluster (BRAID_STORE) rather than braid's
// TCP store at host:port: new processes find it in their own BRAID_STORE.
constexpr uint64_t kEtcdStoreNonce = 0x726f7473'64637465ull;  // "etcdstor"

struct UniqueId {
  std::string host;
  int port = 0;
  uint64_t nonce = 0;
  AuthKey key;
  uint64_t growToken = 0;  // non-zero: a grow id
};

// Writes `id` into `out`. A host longer than kUniqueIdMaxHost cannot be represented: the id
// written then fails decodeUniqueId with a message saying so (the API only ever passes IPv4
// literals, so this is a programming error surfaced where the id is used). Pure.
void encodeUniqueId(const UniqueId& id, char out[kUniqueIdBytes]);

// Validates and decodes an id: magic, version, checksum, port range, host length and
// characters, non-zero nonce and key (for a grow id: a non-zero token). kInvalidArgument
// saying what is wrong otherwise. Either kind decodes; callers check which they got. Pure.
StatusOr<UniqueId> decodeUniqueId(const char in[kUniqueIdBytes]);

// 64 random bits from getrandom(), never 0 (0 means "no nonce" to the store). Thread-safe;
// may block only at early boot before the kernel's entropy pool is initialized.
uint64_t randomNonce();

}  // namespace braid::bootstrap
