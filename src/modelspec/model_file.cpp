// model_file.cpp — whole-file checks: config, tensor directory, tokenizer keys, ds4 compatibility.
#include "modelspec/model_file.h"

#include <unordered_set>

namespace ds4::modelspec {

const std::vector<std::string>& required_special_tokens() {
  static const std::vector<std::string> kTokens = {
      "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
      "<think>", "</think>", "｜DSML｜"};
  return kTokens;
}

namespace {

std::vector<std::string> check_tokenizer(const ModelConfig& cfg, const gguf::File& f) {
  std::vector<std::string> errs;
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  const gguf::Array* arr = tokens ? tokens->as_array() : nullptr;
  if (!arr || arr->elem_type != gguf::ValueType::string) {
    errs.push_back("tokenizer.ggml.tokens: expected an ARRAY of STRING (the vocabulary), " +
                   std::string(tokens ? "got another type" : "key is missing"));
  } else {
    if (arr->items.size() != cfg.n_vocab)
      errs.push_back("tokenizer.ggml.tokens: expected " + std::to_string(cfg.n_vocab) +
                     " entries (deepseek4.vocab_size), got " + std::to_string(arr->items.size()));
    std::unordered_set<std::string_view> present;
    for (const auto& v : arr->items)
      if (const std::string* s = v.as_string()) present.insert(*s);
    for (const auto& t : required_special_tokens())
      if (!present.count(t)) errs.push_back("tokenizer.ggml.tokens: special token " + t + " is missing");
  }
  const gguf::Value* merges = f.find("tokenizer.ggml.merges");
  const gguf::Array* marr = merges ? merges->as_array() : nullptr;
  if (!marr || marr->elem_type != gguf::ValueType::string)
    errs.push_back("tokenizer.ggml.merges: expected an ARRAY of STRING, " +
                   std::string(merges ? "got another type" : "key is missing"));
  return errs;
}

}  // namespace

Status ModelFileReport::status() const {
  if (!tokenizer_errors.empty()) return invalid_data(tokenizer_errors.front());
  return tensors.status();
}

Result<ModelFileReport> check_model_file(const gguf::File& file, TypeRule rule) {
  ModelFileReport rep;
  DS4_ASSIGN_OR_RETURN(rep.cfg, config_from_gguf(file));
  rep.tensors = check_tensors(rep.cfg, file.tensors(), CheckOptions{rule, false});
  rep.tokenizer_errors = check_tokenizer(rep.cfg, file);
  if (Status s = check_flash_shape(rep.cfg); !s.ok()) {
    rep.ds4_reason = s.message();
  } else if (auto strict = check_tensors(rep.cfg, file.tensors(), CheckOptions{TypeRule::ds4, false});
             !strict.ok()) {
    rep.ds4_reason = strict.errors.front();
  } else if (!rep.tokenizer_errors.empty()) {
    rep.ds4_reason = rep.tokenizer_errors.front();
  } else {
    rep.ds4_compatible = true;
  }
  return rep;
}

Result<ModelConfig> validate_model_file(const gguf::File& file, TypeRule rule) {
  DS4_ASSIGN_OR_RETURN(auto rep, check_model_file(file, rule));
  DS4_RETURN_IF_ERROR(rep.status().with_context(file.path()));
  return rep.cfg;
}

bool is_mtp_file(const gguf::File& file) {
  for (const auto& t : file.tensors())
    if (t.name.rfind("mtp.0.", 0) == 0) return true;
  return false;
}

TensorCheckReport check_mtp_file(const ModelConfig& main_cfg, const gguf::File& mtp_file, TypeRule rule) {
  return check_tensors(main_cfg, mtp_file.tensors(), CheckOptions{rule, true});
}

}  // namespace ds4::modelspec
