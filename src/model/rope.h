// rope.h — per-layer RoPE inverse-frequency tables (MODEL.md §5.3): plain base for ratio-0 layers,
// base + YaRN blend (no magnitude factor) for compressed layers.
// Deliberately not here: applying the rotation (backend op `rope`).
#pragma once

#include <vector>

namespace ds4::model {

struct RopeFreqParams {
  int n_rot = 64;              // R
  double base = 10000;         // freq base of the layer
  bool yarn = false;           // compressed layers
  double factor = 16;          // YaRN scaling factor
  double beta_fast = 32, beta_slow = 1;
  double orig_context = 65536;
};

// ω_i for i = 0 … R/2−1, in double.
std::vector<double> rope_freqs(const RopeFreqParams& p);

}  // namespace ds4::model
