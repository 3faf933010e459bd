// model_identity.h — what a saved session state depends on, as a short hex string for the disk KV
// cache (ModelInfo::kv_identity): the GGUF's metadata and tensor directory, a sample of every
// non-routed-expert tensor's bytes, and the numerics options that change the KV rows. A cache entry
// written under another identity must never be restored.
//
// The routed-expert tensors' types and bytes are left out on purpose and reported separately as
// routed_expert_bits: a 2-bit and a 4-bit file of one model then share checkpoints (ds4's default),
// and the server rejects the other quant only when asked (--kv-cache-reject-different-quant).
// Deliberately not here: cryptographic strength. This detects a different model; the cache key that
// binds a checkpoint to its prompt text is SHA-256 (src/kvstore).
#pragma once

#include <string>

#include "ds4/engine.h"
#include "gguf/gguf.h"

namespace ds4::runtime {

struct ModelIdentity {
  std::string hex;             // 32 hex digits (two independent 64-bit FNV-1a streams)
  int routed_expert_bits = 0;  // 2 (IQ2_XXS/Q2_K), 4 (Q4_K), 8 (Q8_0), 16 (F16/BF16), 32 (F32); 0 = none
};

ModelIdentity model_identity(const gguf::File& file, const EngineOptions& opts);

}  // namespace ds4::runtime
