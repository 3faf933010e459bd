// generate.h — named generator profiles and writing a synthetic model (and its MTP file) to disk.
//
// A profile = a ModelConfig (modelspec/profiles.h), a type policy, how quantized payloads are made
// and which tokenizer goes into the metadata:
//   tiny        tiny-6 shapes, F32 (or F16), the 512-token small vocabulary      (golden-logit model)
//   tiny-chat   tiny-6 shapes with the full 129,280-token vocab and the real DeepSeek tokenizer
//   tiny-quant  tiny-6 schedule, E = F = 256, q2 types (or q4) quantized from floats
//   flash-q2    the published q2 file's directory, random valid blocks, real tokenizer
//   flash-q4    the published q4 file's directory, same
// Deliberately not here: argument parsing (main.cpp), value distributions (payload.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ds4/status.h"
#include "modelspec/config.h"
#include "modelspec/inventory.h"
#include "modelspec/metadata_writer.h"
#include "payload.h"

namespace ds4::gen {

enum class TokenizerSource { small_vocab, deepseek_json };

struct Profile {
  std::string name;
  modelspec::ModelConfig cfg;
  modelspec::TypePolicy policy = modelspec::TypePolicy::f32;
  QuantSource quant_source = QuantSource::quantize_floats;
  TokenizerSource tokenizer = TokenizerSource::small_vocab;
  modelspec::MetadataOptions meta;
  bool layers_override = false;  // recorded as ds4cpp.generator.layers
};

struct ProfileOptions {
  bool f16 = false;                                // tiny/tiny-chat: F16 instead of F32 weights
  std::optional<modelspec::TypePolicy> types;      // override the profile's type policy
  // Override the layer count, keeping the schedule pattern (0, 0, 4, HCA, 4, …) and every width:
  // e.g. a 2-layer model with the full Flash shapes for loader/kernel work without 81 GiB.
  uint32_t layers = 0;
};

Result<Profile> make_profile(const std::string& name, const ProfileOptions& opts);

struct GenerateOptions {
  std::string out_path;
  uint64_t seed = 1;
  int threads = 1;
  std::string tokenizer_json;  // HF tokenizer.json for TokenizerSource::deepseek_json
  // Zero tensor data (FORMATS.md §3.7 "full-shape sparse file"): the real header and directory, no
  // disk used for the payload. For loader/validator tests of the full shape, not for numerics.
  bool zeros = false;
  // With `zeros`: tensors whose name contains one of these substrings get their random payload, all
  // others stay holes. E.g. {"token_embd", "norm", "hc_", "ffn_gate_inp", "exp_probs_b"} gives
  // token-dependent hidden states and so distinct routed experts per token (an all-zero file makes
  // every router score tie) while the file still takes ~1 GB of disk instead of ~86 GB.
  std::vector<std::string> zeros_except;
};

Status write_model(const Profile& p, const GenerateOptions& opts);
// The MTP block as a separate GGUF (like the published MTP file): `mtp.0.*` tensors only.
Status write_mtp(const Profile& p, const GenerateOptions& opts);

}  // namespace ds4::gen
