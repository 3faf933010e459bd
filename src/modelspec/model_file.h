// model_file.h — one call that decides whether an opened GGUF is a model ds4cpp can run.
//
// Combines: the config from metadata (config.h), the tensor directory against the inventory
// (inventory.h check_tensors), and the tokenizer keys the engine needs (tokenizer.ggml.tokens with
// vocab_size entries including the seven special tokens ds4 looks up, and tokenizer.ggml.merges).
// Also says whether antirez's ds4 itself would accept the file (Flash shape and exact types), which
// ds4-inspect prints as information. The MTP file has no config of its own: it is checked against
// the main model's config.
// Deliberately not here: tokenizer construction (src/tokenizer), weight binding (src/model).
#pragma once

#include <string>
#include <vector>

#include "ds4/status.h"
#include "gguf/gguf.h"
#include "modelspec/config.h"
#include "modelspec/inventory.h"

namespace ds4::modelspec {

struct ModelFileReport {
  ModelConfig cfg;
  TensorCheckReport tensors;
  std::vector<std::string> tokenizer_errors;
  bool ds4_compatible = false;  // antirez/ds4 would load it (Flash shape, ds4's exact types)
  std::string ds4_reason;       // why not, when !ds4_compatible
  bool ok() const { return tensors.ok() && tokenizer_errors.empty(); }
  Status status() const;        // the first problems as one invalid_data Status, or Ok
};

// Fails only when the config itself is unusable (the error names the key); tensor and tokenizer
// problems are listed in the report.
Result<ModelFileReport> check_model_file(const gguf::File& file, TypeRule rule = TypeRule::engine);
// Convenience for loaders: config + every check, first problem as the error.
Result<ModelConfig> validate_model_file(const gguf::File& file, TypeRule rule = TypeRule::engine);

// True if the file holds MTP tensors (`mtp.0.*`) rather than a main model.
bool is_mtp_file(const gguf::File& file);
// Checks an MTP file's directory against the main model's config.
TensorCheckReport check_mtp_file(const ModelConfig& main_cfg, const gguf::File& mtp_file,
                                 TypeRule rule = TypeRule::engine);

// The seven tokens ds4 looks up by string (FORMATS.md §3.2).
const std::vector<std::string>& required_special_tokens();

}  // namespace ds4::modelspec
