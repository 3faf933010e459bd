// cmd_perplexity.cpp — `ds4 perplexity -m MODEL (--file F | -p TEXT)`: held-out perplexity of a text.
//
// Method (the same as training/train.py's held-out evaluation, so the two numbers are comparable):
// the text is tokenized as one stream (optionally BOS first), cut into non-overlapping windows of
// `window + 1` tokens at stride `window`; each window is evaluated from an empty session, and the
// negative log-likelihood of its last `window` tokens given their prefixes is summed.
// ppl = exp(Σ nll / Σ predicted tokens). A trailing partial window is dropped, as there.
// Deliberately not here: sliding-window (strided) evaluation with overlapping context.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_common.h"
#include "ds4/engine.h"
#include "ds4/sampler.h"

const char* ds4_cmd_perplexity_help() { return "held-out perplexity of a text (windows, teacher forcing)"; }

int ds4_cmd_perplexity(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4 perplexity — perplexity of a text in non-overlapping windows of --window predicted tokens,\n"
               "each evaluated from an empty session (the method of training/train.py).",
               "ds4 perplexity"};
  cli::EngineFlags ef;
  cli::add_engine_flags(app, ef);
  std::string file, prompt;
  int64_t window = 512;
  int64_t max_windows = 0;
  bool add_bos = false;
  app.add_option("-f,--file", file, "text file to evaluate");
  app.add_option("-p,--prompt", prompt, "text to evaluate");
  app.add_option("--window", window, "predicted tokens per window")->capture_default_str();
  app.add_option("--max-windows", max_windows, "evaluate at most this many windows (0 = all)");
  app.add_flag("--bos", add_bos, "prepend BOS to the token stream");
  try {
    app.parse(cli::normalize_args(argc, argv));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (file.empty() == prompt.empty()) {
    std::fprintf(stderr, "ds4 perplexity: give exactly one of --file F or -p TEXT\n");
    return 2;
  }
  if (window < 1) {
    std::fprintf(stderr, "ds4 perplexity: --window must be >= 1\n");
    return 2;
  }
  if (!file.empty()) {
    if (!cli::read_file(file, prompt)) {
      std::fprintf(stderr, "ds4 perplexity: cannot read '%s'\n", file.c_str());
      return 2;
    }
  }
  EngineOptions eo;
  if (!cli::engine_options(ef, eo)) return 2;
  if (eo.max_context < window + 1) eo.max_context = window + 1;
  auto engine = Engine::open(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "ds4 perplexity: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  EncodeOptions enc;
  enc.add_bos = add_bos;
  const std::vector<TokenId> ids = (*engine)->tokenizer().encode(prompt, enc);
  const int64_t n_windows_all = (static_cast<int64_t>(ids.size()) - 1) / window;
  const int64_t n_windows = max_windows > 0 ? std::min(max_windows, n_windows_all) : n_windows_all;
  if (n_windows < 1) {
    std::fprintf(stderr, "ds4 perplexity: %zu tokens is less than one window of %lld + 1\n", ids.size(),
                 static_cast<long long>(window));
    return 2;
  }
  const int V = (*engine)->info().n_vocab;
  double nll = 0;
  int64_t count = 0;
  std::vector<float> logits;
  for (int64_t w = 0; w < n_windows; ++w) {
    auto session = (*engine)->new_session();
    if (!session.ok()) {
      std::fprintf(stderr, "ds4 perplexity: %s\n", session.status().to_string().c_str());
      return 1;
    }
    const TokenId* base = ids.data() + w * window;
    Status st = (*session)->eval_all(std::span<const TokenId>(base, window), logits);
    if (!st.ok()) {
      std::fprintf(stderr, "ds4 perplexity: %s\n", st.to_string().c_str());
      return 1;
    }
    for (int64_t t = 0; t < window; ++t) {
      nll -= token_logprob(std::span<const float>(logits.data() + t * V, V), base[t + 1]);
      ++count;
    }
  }
  const double mean = nll / static_cast<double>(count);
  std::printf("tokens %lld windows %lld nll/token %.6f perplexity %.4f\n", static_cast<long long>(count),
              static_cast<long long>(n_windows), mean, std::exp(mean));
  return 0;
}
