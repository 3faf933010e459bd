// cmd_generate.cpp — `ds4 -m MODEL -p TEXT [-n N] [--temp T] [--seed S] [--nothink]`: render the prompt
// as a DeepSeek V4 chat turn (system + user, assistant prefix with or without thinking), prefill it,
// then sample until EOS or -n tokens, streaming text to stdout and timings to stderr.
// Deliberately not here: the interactive REPL, MTP drafting, disk KV cache.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "chat/chat.h"
#include "cli_common.h"
#include "ds4/engine.h"
#include "ds4/sampler.h"

const char* ds4_cmd_generate_help() { return "generate text from a prompt (default command: ds4 -m MODEL -p TEXT)"; }

int ds4_cmd_generate(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4 generate — one-shot chat generation.\n"
               "The prompt is rendered as a DeepSeek V4 chat turn: BOS + system + <｜User｜> + prompt +\n"
               "<｜Assistant｜> + <think> (or </think> with --nothink). Text goes to stdout, timings to stderr.",
               "ds4"};
  cli::EngineFlags ef;
  cli::add_engine_flags(app, ef);
  std::string prompt, prompt_file, system = "You are a helpful assistant";
  int64_t n_predict = 50000;
  SamplerOptions so;
  so.min_p = 0.05f;
  bool have_seed = false, nothink = false, think_max = false, think = false, raw = false, quiet = false;
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("--prompt-file", prompt_file, "read the prompt from a file");
  app.add_option("--system", system, "system prompt (also -sys; empty disables)")->capture_default_str();
  app.add_option("-n,--tokens", n_predict, "maximum tokens to generate")->capture_default_str();
  app.add_option("--temp", so.temperature, "temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", so.top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  app.add_option("--top-p", so.top_p, "nucleus mass")->capture_default_str();
  app.add_option("--min-p", so.min_p, "relative probability floor")->capture_default_str();
  auto* seed_opt = app.add_option("--seed", so.seed, "sampling seed (default: time-based)");
  app.add_flag("--think", think, "thinking mode (default)");
  app.add_flag("--think-max", think_max, "Think Max (needs --ctx >= 393216, else downgraded to --think)");
  app.add_flag("--nothink", nothink, "answer without thinking");
  app.add_flag("--raw", raw, "tokenize the prompt as is (no chat template, specials recognized)");
  app.add_flag("-q,--quiet", quiet, "no timing summary on stderr");
  try {
    app.parse(cli::normalize_args(argc, argv));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  have_seed = seed_opt->count() > 0;
  if (!have_seed) so.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  if (!prompt_file.empty()) {
    if (!cli::read_file(prompt_file, prompt)) {
      std::fprintf(stderr, "ds4: cannot read --prompt-file '%s'\n", prompt_file.c_str());
      return 1;
    }
  }
  if (prompt.empty()) {
    std::fprintf(stderr, "ds4: no prompt given (-p TEXT or --prompt-file FILE); the interactive REPL is not built\n");
    return 2;
  }
  EngineOptions eo;
  if (!cli::engine_options(ef, eo)) return 2;
  auto t_load = std::chrono::steady_clock::now();
  auto engine = Engine::open(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "ds4: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  const Tokenizer& tok = (*engine)->tokenizer();

  std::string text = prompt;
  if (!raw) {
    chat::ThinkMode mode = nothink ? chat::ThinkMode::none : chat::ThinkMode::high;
    if (think_max && !nothink) {
      if (ef.ctx >= chat::kThinkMaxMinContext) {
        mode = chat::ThinkMode::max;
      } else {
        std::fprintf(stderr, "ds4: --think-max needs --ctx >= %lld; using --think\n",
                     static_cast<long long>(chat::kThinkMaxMinContext));
      }
    }
    text = chat::render_completion_prompt(system, prompt, mode);
  }
  EncodeOptions enc;
  enc.parse_special = true;
  const std::vector<TokenId> ids = tok.encode(text, enc);
  auto session = (*engine)->new_session();
  if (!session.ok()) {
    std::fprintf(stderr, "ds4: %s\n", session.status().to_string().c_str());
    return 1;
  }
  Session& s = **session;
  const auto t0 = std::chrono::steady_clock::now();
  EvalOptions evo;
  Status st = s.eval(ids, evo);
  if (!st.ok()) {
    std::fprintf(stderr, "ds4: prefill: %s\n", st.to_string().c_str());
    return 1;
  }
  const auto t1 = std::chrono::steady_clock::now();
  Sampler sampler(so);
  StreamDecoder dec(tok);
  int64_t generated = 0;
  const TokenId eos = tok.eos_id();
  while (generated < n_predict && s.position() < s.max_context()) {
    const TokenId next = sampler.sample(s.logits());
    ++generated;
    if (next == eos) break;
    const std::string piece = dec.push(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    st = s.eval(std::span<const TokenId>(&next, 1), evo);
    if (!st.ok()) {
      std::fprintf(stderr, "\nds4: decode: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  const std::string tail = dec.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  const auto t2 = std::chrono::steady_clock::now();
  if (!quiet) {
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::fprintf(stderr, "ds4: load %.2f s; prefill %zu tokens in %.3f s (%.1f tok/s); generated %lld tokens in %.3f s (%.1f tok/s)\n",
                 secs(t_load, t0), ids.size(), secs(t0, t1), ids.size() / std::max(1e-9, secs(t0, t1)),
                 static_cast<long long>(generated), secs(t1, t2), generated / std::max(1e-9, secs(t1, t2)));
  }
  return 0;
}
