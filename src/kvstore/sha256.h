// sha256.h — SHA-256 through OpenSSL's EVP interface: one-shot digests, an incremental hasher that
// can be copied (the prefix index hashes a prompt once and forks the state at each boundary), and
// lowercase hex. Deliberately not here: HMAC or any keyed use; these digests name and check files.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ds4::kvstore {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256& other);
  Sha256& operator=(const Sha256& other);
  void update(const void* data, size_t n);
  void update(std::span<const uint8_t> bytes) { update(bytes.data(), bytes.size()); }
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest of everything fed so far; the hasher itself is left unchanged (works on a copy).
  Digest peek() const;

 private:
  void* ctx_;  // EVP_MD_CTX*, owned
};

Digest sha256(const void* data, size_t n);
inline Digest sha256(std::span<const uint8_t> b) { return sha256(b.data(), b.size()); }
std::string to_hex(std::span<const uint8_t> bytes);
inline std::string to_hex(const Digest& d) { return to_hex(std::span<const uint8_t>(d)); }
// Parses 64 lowercase/uppercase hex digits; false on anything else.
bool from_hex(std::string_view hex, Digest& out);

}  // namespace ds4::kvstore
