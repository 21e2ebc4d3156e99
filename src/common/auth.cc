#include "common/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/hex.h"
#include "common/log.h"
#include "common/random.h"

namespace braid {

namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool hexToBytes(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hexValue(hex[i]), lo = hexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

std::string AuthKey::hex() const { return braid::hex(bytes.data(), bytes.size()); }

std::string AuthKey::fingerprint() const {
  const Digest d = sha256(std::string("braid key fingerprint\n") + std::string(view()));
  return braid::hex(d.data(), 4);
}

AuthKey randomAuthKey() {
  AuthKey k;
  k.present = true;
  randomBytes(k.bytes.data(), k.bytes.size());
  return k;
}

StatusOr<AuthKey> parseAuthKey(std::string_view text, const std::string& source) {
  text = trim(text);
  AuthKey k;
  k.present = true;
  if (text.size() == 64) {
    bool hex = true;
    for (size_t i = 0; i < 32 && hex; ++i) {
      const int hi = hexValue(text[2 * i]), lo = hexValue(text[2 * i + 1]);
      if (hi < 0 || lo < 0) hex = false;
      else k.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    if (hex) return k;
  }
  if (text.size() < kMinPassphraseChars)
    return invalidArgument(source + " holds " + std::to_string(text.size()) +
                           " characters: a job key is 64 hex digits or a passphrase of at least " +
                           std::to_string(kMinPassphraseChars) + " characters");
  const Digest d = sha256(std::string("braid job key\n") + std::string(text));
  std::memcpy(k.bytes.data(), d.data(), d.size());
  return k;
}

StatusOr<AuthKey> readAuthKeyFile(const std::string& path) {
  const std::string what = "BRAID_AUTH_KEY_FILE '" + path + "'";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return invalidArgument(what + " cannot be opened: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return invalidArgument(what + ": fstat failed: " + std::strerror(err));
  }
  std::string why;
  if (!S_ISREG(st.st_mode)) why = "is not a regular file";
  else if (st.st_uid != geteuid())
    why = "belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " + std::to_string(geteuid()) + ")";
  else if (st.st_mode & 077) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = std::string("has mode ") + mode + ": others may read or change it (chmod 600 it)";
  } else if (st.st_size > static_cast<off_t>(kMaxKeyFileBytes))
    why = "is " + std::to_string(st.st_size) + " bytes, more than a key file's " + std::to_string(kMaxKeyFileBytes);
  if (!why.empty()) {
    close(fd);
    return invalidArgument(what + " " + why);
  }
  std::vector<char> buf(kMaxKeyFileBytes + 1);
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data() + have, buf.size() - have);
    if (n > 0 && (have += static_cast<size_t>(n)) < buf.size()) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return invalidArgument(what + ": read failed: " + std::strerror(err));
    }
    break;
  }
  close(fd);
  if (have > kMaxKeyFileBytes) return invalidArgument(what + " grew past " + std::to_string(kMaxKeyFileBytes) + " bytes");
  return parseAuthKey(std::string_view(buf.data(), have), what);
}

StatusOr<AuthKey> authKeyFromEnv(const std::function<const char*(const char*)>& getenv) {
  auto get = [&getenv](const char* name) { return getenv ? getenv(name) : std::getenv(name); };
  const char* key = get("BRAID_AUTH_KEY");
  const char* file = get("BRAID_AUTH_KEY_FILE");
  if (key && *key && file && *file)
    return invalidArgument("both BRAID_AUTH_KEY and BRAID_AUTH_KEY_FILE are set: set one");
  if (key && *key) return parseAuthKey(key, "BRAID_AUTH_KEY");
  if (file && *file) return readAuthKeyFile(file);
  return AuthKey{};
}

void warnUnauthenticatedOnce(const std::string& where) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  BRAID_SECURITY("%s: this job is not authenticated (no BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE): anyone who can "
                 "reach its ports can join or disturb it; braidrun and braidGetUniqueId make a key themselves",
                 where.c_str());
}

Digest authProof(const AuthKey& key, std::string_view label, std::initializer_list<std::string_view> parts) {
  // Parts are length-prefixed so that no two lists of parts hash alike.
  std::string framed;
  framed.append(label);
  framed.push_back('\0');
  for (std::string_view p : parts) {
    const uint32_t n = static_cast<uint32_t>(p.size());
    framed.append(reinterpret_cast<const char*>(&n), 4);
    framed.append(p);
  }
  return hmacSha256(key.view(), {framed});
}

bool checkAuthProof(const Digest& expected, std::string_view proof) {
  return proof.size() == expected.size() &&
         equalConstantTime(expected.data(), reinterpret_cast<const uint8_t*>(proof.data()), expected.size());
}

std::string authRefusal(const Digest& expected, std::string_view proof, const std::string& what) {
  if (checkAuthProof(expected, proof)) return "";
  if (proof.find_first_not_of('\0') == std::string_view::npos) {
    return "authentication failed: " + what + " has no key and this job has one";
  }
  return "authentication failed: " + what + " does not prove this job's key";
}

}  // namespace braid
