// metadata_writer.h — writes a ModelConfig as `deepseek4.*` metadata with the published value types.
//
// Value types follow the published files (FORMATS.md §3.2/§3.3): counts UINT32, floats FLOAT32,
// context lengths UINT64, compress_ratios INT32 array with a trailing 0 for the MTP slot,
// swiglu_clamp_exp FLOAT32 array, expert_weights_norm BOOL, plus the informational keys ds4 does
// not read (rope.scaling.type, expert_gating_func, nextn_predict_layers, general.*).
// Deliberately not here: the tokenizer section (src/tokenizer), tensors.
#pragma once

#include <string>

#include "gguf/gguf.h"
#include "modelspec/config.h"

namespace ds4::modelspec {

struct MetadataOptions {
  bool mtp_slot = true;           // append a 0 to compress_ratios for the MTP block (official layout)
  std::string size_label;         // general.size_label ("256x8.4B" for Flash); omitted when empty
  uint32_t file_type = 0;         // general.file_type; omitted when 0
};

void write_model_metadata(const ModelConfig& cfg, const MetadataOptions& opts, gguf::Writer& w);

}  // namespace ds4::modelspec
