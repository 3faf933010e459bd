// generate.cpp — profiles and the streaming, multi-threaded write of a synthetic model.
#include "generate.h"

#include <algorithm>

#include "gguf/gguf.h"
#include "modelspec/profiles.h"
#include "tokenizer/hf_import.h"

namespace ds4::gen {

using modelspec::TypePolicy;

Result<Profile> make_profile(const std::string& name, const ProfileOptions& opts) {
  Profile p;
  p.name = name;
  if (name == "tiny" || name == "tiny-chat") {
    p.cfg = modelspec::tiny_config();
    p.policy = opts.f16 ? TypePolicy::f16 : TypePolicy::f32;
    if (name == "tiny-chat") {
      p.cfg.name = "DeepSeek V4 tiny-chat (synthetic)";
      p.cfg.n_vocab = 129280;
      p.tokenizer = TokenizerSource::deepseek_json;
    }
  } else if (name == "tiny-quant") {
    p.cfg = modelspec::tiny_quant_config();
    p.policy = TypePolicy::q2;
  } else if (name == "flash-q2" || name == "flash-q4") {
    p.cfg = modelspec::flash_config();
    p.cfg.name = "DeepSeek V4 Flash (synthetic random weights)";
    p.policy = name == "flash-q2" ? TypePolicy::q2 : TypePolicy::q4;
    p.quant_source = QuantSource::random_blocks;
    p.tokenizer = TokenizerSource::deepseek_json;
    p.meta.size_label = "256x8.4B";
    if (name == "flash-q2") p.meta.file_type = 19;  // llama.cpp MOSTLY_IQ2_XXS, as the q2 file
  } else {
    return invalid_argument("unknown profile '" + name +
                            "' (expected tiny, tiny-chat, tiny-quant, flash-q2 or flash-q4)");
  }
  if (opts.f16 && p.tokenizer == TokenizerSource::deepseek_json && p.cfg.n_layer == 43)
    return invalid_argument("--f16 applies to the tiny profiles; use --types f16 for " + name);
  if (opts.f16 && name == "tiny-quant")
    return invalid_argument("--f16 applies to tiny and tiny-chat; use --types f16 for tiny-quant");
  if (opts.types) p.policy = *opts.types;
  if (opts.layers != 0) {
    const uint32_t hca = p.cfg.hca_ratio() ? p.cfg.hca_ratio() : 128;
    const float clamp = p.cfg.swiglu_clamp.empty() ? 10.0f : p.cfg.swiglu_clamp[0];
    p.cfg.n_layer = opts.layers;
    p.cfg.compress_ratios.clear();
    for (uint32_t l = 0; l < opts.layers; ++l) p.cfg.compress_ratios.push_back(modelspec::scheduled_ratio(l, hca));
    p.cfg.swiglu_clamp.assign(opts.layers, clamp);
    p.cfg.n_hash_layers = std::min(p.cfg.n_hash_layers, opts.layers);
    p.layers_override = true;
  }
  DS4_RETURN_IF_ERROR(modelspec::validate_config(p.cfg));
  return p;
}

namespace {

Result<tokenizer::TokenizerData> load_tokenizer(const Profile& p, const GenerateOptions& opts) {
  if (p.tokenizer == TokenizerSource::small_vocab) {
    tokenizer::SmallVocabOptions so;
    so.vocab_size = static_cast<int32_t>(p.cfg.n_vocab);
    return tokenizer::make_small_vocab(so);
  }
  if (opts.tokenizer_json.empty())
    return invalid_argument("profile " + p.name + " needs the DeepSeek tokenizer.json (--tokenizer-json)");
  tokenizer::HfImportOptions ho;
  ho.tokenizer_json_path = opts.tokenizer_json;
  DS4_ASSIGN_OR_RETURN(auto td, tokenizer::import_hf_tokenizer(ho));
  if (td.tokens.size() != p.cfg.n_vocab)
    return invalid_data("tokenizer " + opts.tokenizer_json + " has " + std::to_string(td.tokens.size()) +
                        " tokens, the model's vocab_size is " + std::to_string(p.cfg.n_vocab));
  return td;
}

Status write_inventory(const modelspec::Inventory& inv, const Profile& p, const GenerateOptions& opts,
                       gguf::Writer& w, const std::string& path) {
  for (const auto& e : inv.tensors) w.add_tensor(gguf::TensorSpec{e.name, e.ne, e.type});
  PayloadOptions po;
  po.seed = opts.seed;
  po.quant_source = p.quant_source;
  po.n_expert = p.cfg.n_expert;
  gguf::WriteOptions wo;
  wo.n_threads = opts.threads < 1 ? 1 : opts.threads;
  if (opts.zeros && opts.zeros_except.empty()) return w.write(path, gguf::PayloadFn{}, wo);  // holes on disk
  if (opts.zeros) {  // all-zero blocks decode to 0.0: holes, except the named tensors
    wo.hole = [&](size_t i) {
      const std::string& name = inv.tensors[i].name;
      return std::none_of(opts.zeros_except.begin(), opts.zeros_except.end(),
                          [&](const std::string& pat) { return name.find(pat) != std::string::npos; });
    };
  }
  return w.write(path, [&](size_t i, std::span<uint8_t> out) { return fill_payload(inv.tensors[i], po, out); }, wo);
}

}  // namespace

Status write_model(const Profile& p, const GenerateOptions& opts) {
  DS4_ASSIGN_OR_RETURN(auto inv, modelspec::build_inventory(p.cfg, p.policy));
  DS4_ASSIGN_OR_RETURN(auto td, load_tokenizer(p, opts));
  gguf::Writer w;
  modelspec::write_model_metadata(p.cfg, p.meta, w);
  w.add_u64("ds4cpp.generator.seed", opts.seed);
  w.add_string("ds4cpp.generator.profile", p.name + " (" + modelspec::type_policy_name(p.policy) + ")");
  if (p.layers_override) w.add_u32("ds4cpp.generator.layers", p.cfg.n_layer);
  if (opts.zeros) {
    std::string except;
    for (const auto& pat : opts.zeros_except) {
      if (!except.empty()) except += ',';
      except += pat;
    }
    w.add_string("ds4cpp.generator.payload", except.empty() ? "zeros" : "zeros except " + except);
  }
  tokenizer::write_tokenizer_metadata(td, w);
  return write_inventory(inv, p, opts, w, opts.out_path);
}

Status write_mtp(const Profile& p, const GenerateOptions& opts) {
  DS4_ASSIGN_OR_RETURN(auto inv, modelspec::build_mtp_inventory(p.cfg, p.policy));
  gguf::Writer w;
  w.add_string("general.architecture", "deepseek4_mtp_support");
  w.add_string("general.name", p.cfg.name + " MTP support");
  w.add_u32("deepseek4.expert_count", p.cfg.n_expert);
  w.add_u32("deepseek4.mtp_layer_count", 1);
  w.add_u32("deepseek4.nextn_predict_layers", 1);
  w.add_u64("ds4cpp.generator.seed", opts.seed);
  return write_inventory(inv, p, opts, w, opts.out_path);
}

}  // namespace ds4::gen
