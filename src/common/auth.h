#pragma once
// The job key: a secret every member of a job knows and nobody else does. Connections prove
// knowledge of it with an HMAC over a fresh challenge (the store's handshake, the tcp data
// handshake); the key itself never travels on the wire.
//
// Where it comes from: braidrun draws a fresh one per job and gives it to its ranks in their
// environment (remote ranks read it from ssh's standard input, never from a command line);
// other launchers set BRAID_AUTH_KEY (64 hex digits, or a passphrase of at least 16
// characters, hashed) or BRAID_AUTH_KEY_FILE (a file only its owner may read, holding the
// same); a braidUniqueId carries one. A job with no key runs unauthenticated, as before, and
// says so once.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/sha256.h"
#include "common/status.h"

namespace braid {

struct AuthKey {
  bool present = false;
  std::array<uint8_t, 32> bytes{};

  // The 32 key bytes as a string_view, for hmacSha256.
  std::string_view view() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
  // 64 lowercase hex digits (what braidrun puts in BRAID_AUTH_KEY).
  std::string hex() const;
  // 8 hex digits of a hash of the key: safe to log, tells two keys apart.
  std::string fingerprint() const;
};

// Decodes hex digits (either case) into bytes; false on an odd length or a non-digit.
bool hexToBytes(std::string_view hex, std::string* out);

constexpr size_t kMinPassphraseChars = 16;
constexpr size_t kMaxKeyFileBytes = 4096;

// A fresh random key (getrandom). Thread-safe.
AuthKey randomAuthKey();

// Reads a key from text: 64 hex digits are the key itself; anything else of at least
// kMinPassphraseChars characters is a passphrase whose SHA-256 is the key. Surrounding
// whitespace is ignored. kInvalidArgument naming `source` otherwise. Pure.
StatusOr<AuthKey> parseAuthKey(std::string_view text, const std::string& source);

// Reads a key file: a regular file owned by this user that nobody else may read or write
// (mode 0600 or stricter) and at most kMaxKeyFileBytes long, holding a key as parseAuthKey
// reads it. kInvalidArgument naming the file and what is wrong otherwise.
StatusOr<AuthKey> readAuthKeyFile(const std::string& path);

// The key from BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE (looked up with `getenv`, the process
// environment by default); setting both is an error, setting neither gives a key with
// present = false.
StatusOr<AuthKey> authKeyFromEnv(const std::function<const char*(const char*)>& getenv = nullptr);

// Logs (whatever BRAID_DEBUG says), once per process, that a job runs without a key. The
// caller says it only on one rank of a job of more than one.
void warnUnauthenticatedOnce(const std::string& where);

// A proof that the holder of `key` saw `challenge` in the role `label`: HMAC-SHA256 over the
// label and every part. Labels keep a proof made for one purpose from passing for another.
Digest authProof(const AuthKey& key, std::string_view label, std::initializer_list<std::string_view> parts);

// Whether `proof` (any length) equals the expected one, in constant time.
bool checkAuthProof(const Digest& expected, std::string_view proof);

// Why a peer's `proof`, carried in `what` (e.g. "its hello"), is refused: "" when it is the
// expected one; else "authentication failed: ...", saying whether `what` carried no proof
// (all zeros: a peer without a key) or a wrong one.
std::string authRefusal(const Digest& expected, std::string_view proof, const std::string& what);

}  // namespace braid
