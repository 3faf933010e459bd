// model_identity.cpp — see model_identity.h.
#include "runtime/model_identity.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string_view>

namespace ds4::runtime {
namespace {

// Two FNV-1a 64 streams with different offset bases: 128 bits against accidental collisions.
class Hasher {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      a_ = (a_ ^ b[i]) * 0x100000001b3ull;
      b_ = (b_ ^ b[i]) * 0x100000001b3ull;
    }
  }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) { bytes(&v, 8); }
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a_),
                  static_cast<unsigned long long>(b_));
    return buf;
  }

 private:
  uint64_t a_ = 0xcbf29ce484222325ull;
  uint64_t b_ = 0x84222325cbf29ce4ull;
};

bool routed_expert(std::string_view name) { return name.find("_exps") != std::string_view::npos; }

// Keys that differ between quantizations of one model (they describe the file, not the weights' math).
bool quant_key(std::string_view key) {
  return key == "general.file_type" || key == "general.quantization_version" || key.starts_with("quantize.");
}

int bits_of(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
    case GgmlType::Q2_K: return 2;
    case GgmlType::Q4_K: return 4;
    case GgmlType::Q8_0: return 8;
    case GgmlType::F16:
    case GgmlType::BF16: return 16;
    case GgmlType::F32: return 32;
    default: return 0;
  }
}

}  // namespace

ModelIdentity model_identity(const gguf::File& file, const EngineOptions& opts) {
  Hasher h;
  h.str("ds4cpp-model-identity-v1");
  for (const auto& kv : file.metadata()) {
    if (quant_key(kv.key)) continue;
    h.str(kv.key);
    h.str(kv.value.to_display(std::numeric_limits<size_t>::max()));
  }
  ModelIdentity id;
  constexpr uint64_t kSample = 4096;
  for (const auto& t : file.tensors()) {
    h.str(t.name);
    h.u64(t.ne.size());
    for (uint64_t d : t.ne) h.u64(d);
    if (routed_expert(t.name)) {
      id.routed_expert_bits = std::max(id.routed_expert_bits, bits_of(t.type));
      continue;
    }
    h.u64(t.type_id);
    // Head, middle and tail of the data: different weights of one shape differ there.
    const gguf::Tensor data = file.tensor(t);
    const uint64_t n = t.n_bytes;
    for (uint64_t off : {uint64_t{0}, n / 2, n > kSample ? n - kSample : uint64_t{0}})
      if (data.data && off < n) h.bytes(data.data + off, static_cast<size_t>(std::min(kSample, n - off)));
  }
  // Options that change the KV rows a prompt produces.
  h.u64(opts.numerics == Numerics::official ? 1 : 2);
  h.u64(opts.shared_expert_clamp ? 1 : 0);
  id.hex = h.hex();
  return id;
}

}  // namespace ds4::runtime
