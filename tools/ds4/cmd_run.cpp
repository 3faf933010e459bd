// cmd_run.cpp — `ds4 run -m MODEL --tokens-file F --dump-logits OUT`: teacher-forced evaluation of a
// token sequence, writing the logits of every position (used by golden comparisons and debugging).
// Deliberately not here: sampling (see generate), chat templates.
#include <chrono>
#include <cstring>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli_common.h"
#include "ds4/engine.h"

const char* ds4_cmd_run_help() { return "evaluate a token sequence and dump every position's logits"; }

namespace {

// Text: whitespace/comma-separated decimal ids. Binary (*.i32 / *.bin): little-endian int32.
bool read_tokens(const std::string& path, std::vector<ds4::TokenId>& out, std::string& err) {
  std::string data;
  if (!ds4::cli::read_file(path, data)) {
    err = "cannot read '" + path + "'";
    return false;
  }
  const bool binary = path.size() > 4 && (path.ends_with(".i32") || path.ends_with(".bin"));
  if (binary) {
    if (data.size() % 4 != 0) {
      err = "binary token file size is not a multiple of 4";
      return false;
    }
    out.resize(data.size() / 4);
    std::memcpy(out.data(), data.data(), data.size());
    return true;
  }
  std::string cleaned = data;
  for (char& c : cleaned)
    if (c == ',') c = ' ';
  std::istringstream in(cleaned);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < INT32_MIN || v > INT32_MAX) {
      err = "'" + word + "' is not a token id";
      return false;
    }
    out.push_back(static_cast<ds4::TokenId>(v));
  }
  return true;
}

}  // namespace

int ds4_cmd_run(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4 run — evaluate a token sequence (teacher forcing) and dump the logits.\n"
               "--tokens-file: decimal ids separated by spaces/newlines/commas, or little-endian int32 when the\n"
               "name ends in .i32 or .bin. --dump-logits: raw little-endian float32, row-major [n_tokens][n_vocab];\n"
               "row t holds the logits after token t (predicting token t+1). With -p the text is tokenized as is\n"
               "(special tokens recognized) instead of reading a file.",
               "ds4 run"};
  cli::EngineFlags ef;
  cli::add_engine_flags(app, ef);
  std::string tokens_file, dump, prompt;
  bool decode = false;
  app.add_option("--tokens-file", tokens_file, "token ids to evaluate");
  app.add_option("-p,--prompt", prompt, "text to tokenize and evaluate instead of --tokens-file");
  app.add_option("--dump-logits", dump, "write every position's logits (float32 LE, [n][vocab]) here");
  app.add_flag("--decode", decode, "feed tokens one at a time (decode path) instead of chunked prefill");
  try {
    app.parse(cli::normalize_args(argc, argv));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  EngineOptions eo;
  if (!cli::engine_options(ef, eo)) return 2;
  auto engine = Engine::open(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "ds4 run: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  if (const ModelInfo& mi = (*engine)->info(); mi.upload_bytes > 0)
    std::fprintf(stderr, "ds4 run: weights uploaded to the device: %.2f GB in %.2f s (%.2f GB/s)\n",
                 mi.upload_bytes / 1e9, mi.upload_seconds,
                 mi.upload_seconds > 0 ? mi.upload_bytes / 1e9 / mi.upload_seconds : 0.0);
  std::vector<TokenId> ids;
  if (!prompt.empty()) {
    EncodeOptions enc;
    enc.parse_special = true;
    ids = (*engine)->tokenizer().encode(prompt, enc);
  } else if (!tokens_file.empty()) {
    std::string err;
    if (!read_tokens(tokens_file, ids, err)) {
      std::fprintf(stderr, "ds4 run: --tokens-file: %s\n", err.c_str());
      return 2;
    }
  } else {
    std::fprintf(stderr, "ds4 run: give --tokens-file FILE or -p TEXT\n");
    return 2;
  }
  if (ids.empty()) {
    std::fprintf(stderr, "ds4 run: no tokens to evaluate\n");
    return 2;
  }
  auto session = (*engine)->new_session();
  if (!session.ok()) {
    std::fprintf(stderr, "ds4 run: %s\n", session.status().to_string().c_str());
    return 1;
  }
  const int V = (*engine)->info().n_vocab;
  std::vector<float> all;
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  if (decode) {
    all.resize(ids.size() * V);
    for (size_t i = 0; i < ids.size() && st.ok(); ++i) {
      st = (*session)->eval(std::span<const TokenId>(&ids[i], 1));
      if (st.ok()) std::copy((*session)->logits().begin(), (*session)->logits().end(), all.begin() + i * V);
    }
  } else {
    st = (*session)->eval_all(ids, all);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) {
    std::fprintf(stderr, "ds4 run: %s\n", st.to_string().c_str());
    return 1;
  }
  if (!dump.empty()) {
    FILE* f = std::fopen(dump.c_str(), "wb");
    if (!f || std::fwrite(all.data(), sizeof(float), all.size(), f) != all.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "ds4 run: cannot write '%s'\n", dump.c_str());
      return 1;
    }
  }
  size_t best = 0;
  const float* last = all.data() + (ids.size() - 1) * V;
  for (int v = 1; v < V; ++v)
    if (last[v] > last[best]) best = v;
  std::fprintf(stderr, "ds4 run: %zu tokens, vocab %d, %.3f s (%.1f tok/s), last argmax %zu%s%s\n", ids.size(), V,
               secs, ids.size() / std::max(1e-9, secs), best, dump.empty() ? "" : ", logits written to ",
               dump.c_str());
  return 0;
}
