// ds4-inspect — prints a GGUF's header, metadata (arrays abbreviated), tensor table (the TSV format
// of spec/data/tensors_q2.tsv) and whether ds4cpp can run it; exits non-zero if it cannot.
//
//   ds4-inspect MODEL.gguf                      # main model: config + tensors + tokenizer checks
//   ds4-inspect --main MODEL.gguf MTP.gguf      # an MTP file, checked against its main model
//   ds4-inspect --ds4-strict MODEL.gguf         # also fail unless antirez/ds4 itself would load it
// Exit codes: 0 valid, 1 invalid model, 2 unreadable file or bad arguments.
// Deliberately thin: every check lives in src/modelspec (model_file.h).
#include <cstdio>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "gguf/gguf.h"
#include "modelspec/inventory.h"
#include "modelspec/layer_plan.h"
#include "modelspec/model_file.h"

namespace {

using namespace ds4;

void print_header(const gguf::File& f) {
  std::printf("# file: %s\n# GGUF v%u, %llu bytes, alignment %llu, data section at %llu, %zu tensors, %zu metadata keys\n",
              f.path().c_str(), f.version(), static_cast<unsigned long long>(f.file_size()),
              static_cast<unsigned long long>(f.alignment()), static_cast<unsigned long long>(f.data_offset()),
              f.tensors().size(), f.metadata().size());
}

void print_metadata(const gguf::File& f) {
  std::printf("\n## metadata\n");
  for (const auto& kv : f.metadata())
    std::printf("%s\t%s\t%s\n", kv.key.c_str(), gguf::value_type_name(kv.value.type),
                kv.value.to_display(8).c_str());
}

void print_tensors(const gguf::File& f) {
  std::printf("\n## tensors\n%s\n", modelspec::tsv_header().c_str());
  for (const auto& t : f.tensors()) {
    std::string dims;
    for (size_t i = 0; i < t.ne.size(); ++i) dims += (i ? "," : "") + std::to_string(t.ne[i]);
    auto tr = type_traits(t.type_id);
    std::string tname = tr ? modelspec::type_upper_name(t.type) : "UNKNOWN";
    std::printf("%s\t%s\t%u\t%s\t%llu\n", t.name.c_str(), tname.c_str(), t.type_id, dims.c_str(),
                static_cast<unsigned long long>(t.n_bytes));
  }
}

// Count and bytes per type, like FORMATS.md §3.4's totals table.
void print_type_totals(const gguf::File& f) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    auto tr = type_traits(t.type_id);
    auto& e = by_type[tr ? modelspec::type_upper_name(t.type) : "id " + std::to_string(t.type_id)];
    e.first += 1;
    e.second += t.n_bytes;
    total += t.n_bytes;
  }
  std::printf("\n## totals\n");
  for (const auto& [name, e] : by_type)
    std::printf("%s\t%llu tensors\t%llu bytes\n", name.c_str(), static_cast<unsigned long long>(e.first),
                static_cast<unsigned long long>(e.second));
  std::printf("all\t%zu tensors\t%llu bytes\n", f.tensors().size(), static_cast<unsigned long long>(total));
}

void print_list(const char* title, const std::vector<std::string>& items) {
  for (const auto& s : items) std::printf("%s: %s\n", title, s.c_str());
}

void print_plan(const modelspec::ModelConfig& c) {
  std::printf("config: %u layers, E %u, V %u, H %u, D %u (rope %u), Q %u, G %u x Ro %u, experts %u (top %u), F %u,"
              " window %u, indexer %u x %u top-%u, hash layers %u\n",
              c.n_layer, c.n_embd, c.n_vocab, c.n_head, c.head_dim, c.n_rot, c.q_lora_rank, c.out_groups,
              c.o_lora_rank, c.n_expert, c.n_expert_used, c.expert_ff, c.sliding_window, c.indexer_heads,
              c.indexer_head_dim, c.indexer_top_k, c.n_hash_layers);
  std::string s;
  for (const auto& p : modelspec::layer_plan(c))
    s += (p.index ? " " : "") + std::to_string(p.compress_ratio) + (p.hash_routing ? "h" : "");
  std::printf("layers (ratio, h = hash routing): %s\n", s.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds4-inspect: GGUF metadata, tensor table and DeepSeek V4 validation"};
  std::string path, main_path;
  bool strict = false, no_meta = false, no_tensors = false;
  app.add_option("file", path, "GGUF file")->required();
  app.add_option("--main", main_path, "main model whose config an MTP file is checked against");
  app.add_flag("--ds4-strict", strict, "fail unless antirez/ds4 itself would accept the file");
  app.add_flag("--no-metadata", no_meta, "do not print the metadata");
  app.add_flag("--no-tensors", no_tensors, "do not print the tensor table");
  CLI11_PARSE(app, argc, argv);

  auto file = gguf::File::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "ds4-inspect: %s\n", file.status().to_string().c_str());
    return 2;
  }
  const gguf::File& f = **file;
  print_header(f);
  if (!no_meta) print_metadata(f);
  if (!no_tensors) print_tensors(f);
  print_type_totals(f);
  std::printf("\n## validation\n");

  const modelspec::TypeRule rule = strict ? modelspec::TypeRule::ds4 : modelspec::TypeRule::engine;
  if (modelspec::is_mtp_file(f)) {
    if (main_path.empty()) {
      std::printf("MTP file: pass --main MODEL.gguf to check its tensors against the main model\n");
      return 0;
    }
    auto main_file = gguf::File::open(main_path);
    if (!main_file.ok()) {
      std::fprintf(stderr, "ds4-inspect: %s\n", main_file.status().to_string().c_str());
      return 2;
    }
    auto cfg = modelspec::config_from_gguf(**main_file);
    if (!cfg.ok()) {
      std::printf("INVALID main model: %s\n", cfg.status().message().c_str());
      return 1;
    }
    auto rep = modelspec::check_mtp_file(*cfg, f, rule);
    print_list("note", rep.notes);
    print_list("error", rep.errors);
    std::printf("%s\n", rep.ok() ? "VALID: MTP block matches the main model" : "INVALID: MTP tensors do not match");
    return rep.ok() ? 0 : 1;
  }
  auto rep = modelspec::check_model_file(f, rule);
  if (!rep.ok()) {
    std::printf("INVALID: %s\n", rep.status().message().c_str());
    std::fprintf(stderr, "ds4-inspect: %s: not a valid DeepSeek V4 model: %s\n", path.c_str(),
                 rep.status().message().c_str());
    return 1;
  }
  print_plan(rep->cfg);
  print_list("note", rep->tensors.notes);
  print_list("error", rep->tensors.errors);
  print_list("error", rep->tokenizer_errors);
  std::printf("ds4 (antirez) would %s%s\n", rep->ds4_compatible ? "accept this file" : "reject this file: ",
              rep->ds4_compatible ? "" : rep->ds4_reason.c_str());
  if (!rep->ok()) {
    std::printf("INVALID: %s\n", rep->status().message().c_str());
    std::fprintf(stderr, "ds4-inspect: %s: %s\n", path.c_str(), rep->status().message().c_str());
    return 1;
  }
  if (strict && !rep->ds4_compatible) {
    std::printf("INVALID (--ds4-strict): %s\n", rep->ds4_reason.c_str());
    return 1;
  }
  std::printf("VALID: DeepSeek V4 model, %zu tensors\n", f.tensors().size());
  return 0;
}
