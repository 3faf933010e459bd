// reference_logits.h — reader for tests/trained/reference_logits.bin, the golden logits of the trained default
// model computed by transformers' DeepseekV4ForCausalLM (float32, TF32 off) with exactly the weights stored in
// models/ds4-tiny-chat.gguf (training/train.py, stage 4).
//
// A full logit row is 129,280 floats, so each position keeps what a comparison needs: max|logit|, the
// log-sum-exp of the row (the whole distribution in one number), the NLL of the next token, the 32 largest
// logits with their ids, and the logits of 96 fixed random vocabulary ids.
//
// File layout (little-endian):
//   "DS4REFL1", u32 n_seq, u32 n_top, u32 n_fixed, u32 reserved, u32 fixed_ids[n_fixed]
//   per sequence: u32 name_len, name, u32 T, u32 V, u32 ids[T],
//     per position: f32 max_abs, f32 lse, f32 nll_next (NaN at the last position),
//                   u32 top_ids[n_top], f32 top_vals[n_top] (descending), f32 fixed_vals[n_fixed]
// Deliberately not here: running the engine or comparing (test_trained_model.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/status.h"

namespace ds4::trained_test {

struct RefPosition {
  float max_abs = 0, lse = 0, nll_next = 0;
  std::vector<uint32_t> top_ids;  // [n_top]
  std::vector<float> top_vals;    // [n_top], descending
  std::vector<float> fixed_vals;  // [n_fixed], for RefFile::fixed_ids
};

struct RefSequence {
  std::string name;
  uint32_t vocab = 0;
  std::vector<int32_t> ids;         // [T] input token ids (BOS first)
  std::vector<RefPosition> pos;     // [T] logits at position t predict ids[t+1]
  double mean_nll() const;          // over positions 0..T-2
  double perplexity() const;        // exp(mean_nll)
};

struct RefFile {
  std::vector<uint32_t> fixed_ids;  // [n_fixed] ascending vocabulary ids
  std::vector<RefSequence> seqs;
};

Result<RefFile> read_reference_file(const std::string& path);

}  // namespace ds4::trained_test
