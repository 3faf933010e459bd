// codec.cpp — the identity payload codec.
#include "kvstore/codec.h"

#include <cstring>

namespace ds4::kvstore {

namespace {
class IdentityCodec final : public PayloadCodec {
 public:
  uint32_t id() const override { return 0; }
  const char* name() const override { return "identity"; }
  Result<std::vector<uint8_t>> encode(std::span<const uint8_t> raw) const override {
    return std::vector<uint8_t>(raw.begin(), raw.end());
  }
  Status decode(std::span<const uint8_t> stored, std::span<uint8_t> raw_out) const override {
    if (stored.size() != raw_out.size()) return invalid_data("identity codec: stored and raw sizes differ");
    if (!stored.empty()) std::memcpy(raw_out.data(), stored.data(), stored.size());
    return Status::Ok();
  }
};
}  // namespace

const PayloadCodec& identity_codec() {
  static const IdentityCodec kIdentity;  // immutable, stateless
  return kIdentity;
}

}  // namespace ds4::kvstore
