// payload.h — the random contents of one tensor of a synthetic DeepSeek V4 model.
//
// Each tensor gets its own RNG stream (model seed ⊕ name), so a file's bytes depend only on the seed
// and the inventory, never on thread count or order. Values follow MODEL.md §14.4's suggested
// scales (matrices N(0, 1/fan_in), norms 1 + 0.1·N, HC base N(0, 0.5) and scale U(0.5, 2), sinks
// N(0, 1), ape N(0, 0.5), router bias N(0, 0.1), embedding N(0, 1), tid2eid distinct expert ids).
// Quantized tensors are either quantized from those floats (small models: the quantization check
// needs real encodings) or written as random valid blocks whose decoded values have the same
// standard deviation (full-size files: 80+ GiB must be fast).
// Deliberately not here: file layout (gguf::Writer), metadata, which profile uses what (main.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "ds4/status.h"
#include "modelspec/inventory.h"

namespace ds4::gen {

enum class QuantSource {
  quantize_floats,  // sample floats, encode with src/quant (exact encoders)
  random_blocks,    // random valid blocks with matching magnitude (fast, for full-size files)
};

struct PayloadOptions {
  uint64_t seed = 1;
  QuantSource quant_source = QuantSource::quantize_floats;
  uint32_t n_expert = 0;  // NE: tid2eid rows hold distinct ids < n_expert
};

// Writes exactly e.n_bytes bytes into out.
Status fill_payload(const modelspec::TensorEntry& e, const PayloadOptions& opts, std::span<uint8_t> out);

// The float values of a tensor before storage rounding, in GGUF element order (n_elements values).
// Exposed so tests and the reference script's expectations can be reasoned about.
void sample_values(const modelspec::TensorEntry& e, uint64_t seed, std::span<float> out);

}  // namespace ds4::gen
