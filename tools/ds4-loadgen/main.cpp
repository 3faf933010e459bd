// ds4-loadgen — load generator for ds4-server (issue #8's benchmark): N concurrent clients, each
// sending R streaming /v1/completions requests one after another (prompt of about P tokens, G
// generated tokens with ignore_eos, greedy). Prints one CSV row per request (TTFT, decode tok/s) and a
// summary: aggregate decode throughput, mean per-session decode rate, TTFT mean/p50/p90/max.
// Several --url targets spread the clients round-robin (the "N separate server processes" side).
// Deliberately not here: starting servers (scripts/loadgen_series.sh), plotting.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "load_client.h"

using namespace ds4::loadgen;

namespace {

// Common English words: with a leading space each is one token in the DeepSeek V4 vocabulary, so a
// prompt of n words is about n tokens (the exact count is reported back by the server's usage).
const char* const kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
    "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will",
    "would", "who", "so", "no", "time", "people", "year", "way", "day", "man", "thing", "woman", "life",
    "child", "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
    "place", "case", "week", "company", "system", "program", "question", "work", "government", "number",
    "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot",
    "right", "study", "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string words(int64_t n, uint64_t seed) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    s += ' ';
    s += kWords[splitmix(seed) % kNumWords];
  }
  return s;
}

bool parse_url(const std::string& u, Target& t) {
  std::string rest = u;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  t.host = rest.substr(0, colon);
  try {
    t.port = std::stoi(rest.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return !t.host.empty() && t.port > 0 && t.port < 65536;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> urls;
  int clients = 1, requests = 1;
  int64_t prompt_tokens = 512, gen_tokens = 128, shared_prefix = 0;
  uint64_t seed = 1;
  std::string csv_path, summary_path, label, api_key;
  bool no_ignore_eos = false;
  int timeout_s = 3600;
  CLI::App app{"ds4-loadgen — concurrent streaming clients against ds4-server; TTFT and decode tok/s as CSV."};
  app.add_option("--url", urls, "server address host:port (repeatable: clients are spread round-robin)")->required();
  app.add_option("-c,--clients", clients, "concurrent clients")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("-r,--requests", requests, "requests per client, one after another")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("-p,--prompt-tokens", prompt_tokens, "prompt length in words (~tokens)")->check(CLI::Range(int64_t{1}, int64_t{10000000}))->capture_default_str();
  app.add_option("-g,--gen-tokens", gen_tokens, "tokens generated per request (max_tokens)")->check(CLI::Range(int64_t{1}, int64_t{10000000}))->capture_default_str();
  app.add_option("--shared-prefix", shared_prefix, "words every prompt starts with (a shared system prompt)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", seed, "prompt seed")->capture_default_str();
  app.add_option("--csv", csv_path, "write the per-request CSV here (default: stdout)");
  app.add_option("--summary-csv", summary_path, "append one summary row to this CSV (header when new)");
  app.add_option("--label", label, "label for the summary row (e.g. one-process or N-processes)");
  app.add_option("--api-key", api_key, "send Authorization: Bearer KEY");
  app.add_option("--timeout", timeout_s, "seconds a request may take")->check(CLI::Range(1, 86400))->capture_default_str();
  app.add_flag("--no-ignore-eos", no_ignore_eos, "let the model stop at EOS (default: generate exactly -g tokens)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<Target> targets;
  for (const auto& u : urls) {
    Target t;
    if (!parse_url(u, t)) {
      std::fprintf(stderr, "ds4-loadgen: bad --url '%s' (want host:port)\n", u.c_str());
      return 2;
    }
    targets.push_back(t);
  }
  if (shared_prefix > prompt_tokens) {
    std::fprintf(stderr, "ds4-loadgen: --shared-prefix (%lld) exceeds --prompt-tokens (%lld)\n",
                 static_cast<long long>(shared_prefix), static_cast<long long>(prompt_tokens));
    return 2;
  }
  std::FILE* csv = stdout;
  if (!csv_path.empty()) {
    csv = std::fopen(csv_path.c_str(), "w");
    if (!csv) {
      std::fprintf(stderr, "ds4-loadgen: cannot write %s\n", csv_path.c_str());
      return 2;
    }
  }

  const std::string prefix = words(shared_prefix, seed * 7919);
  std::vector<std::vector<RequestResult>> results(static_cast<size_t>(clients));
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int r = 0; r < requests; ++r) {
        RequestSpec spec;
        spec.prompt = prefix + words(prompt_tokens - shared_prefix, seed + 1000003ull * static_cast<uint64_t>(c) + static_cast<uint64_t>(r));
        spec.max_tokens = gen_tokens;
        spec.ignore_eos = !no_ignore_eos;
        spec.api_key = api_key;
        spec.timeout_s = timeout_s;
        results[static_cast<size_t>(c)].push_back(run_request(targets[static_cast<size_t>(c) % targets.size()], spec));
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto t1 = Clock::now();

  std::fprintf(csv, "client,request,server,ok,http_status,prompt_tokens,cached_tokens,completion_tokens,ttft_s,decode_tok_s,total_s,error\n");
  std::vector<double> ttft, rate;
  int64_t total_tokens = 0, failed = 0;
  Clock::time_point first_token = Clock::time_point::max(), last_token = Clock::time_point::min();
  for (int c = 0; c < clients; ++c) {
    for (size_t r = 0; r < results[static_cast<size_t>(c)].size(); ++r) {
      const RequestResult& x = results[static_cast<size_t>(c)][r];
      const Target& t = targets[static_cast<size_t>(c) % targets.size()];
      std::string err = x.error;
      std::replace(err.begin(), err.end(), ',', ';');
      std::replace(err.begin(), err.end(), '\n', ' ');
      std::fprintf(csv, "%d,%zu,%s:%d,%d,%d,%lld,%lld,%lld,%.4f,%.2f,%.4f,%s\n", c, r, t.host.c_str(), t.port, x.ok ? 1 : 0,
                   x.http_status, static_cast<long long>(x.prompt_tokens), static_cast<long long>(x.cached_tokens),
                   static_cast<long long>(x.completion_tokens), x.ok ? x.ttft_s() : 0.0, x.ok ? x.decode_tok_s() : 0.0,
                   std::chrono::duration<double>(x.t_end - x.t_send).count(), err.c_str());
      if (!x.ok) {
        ++failed;
        continue;
      }
      ttft.push_back(x.ttft_s());
      rate.push_back(x.decode_tok_s());
      total_tokens += x.completion_tokens;
      first_token = std::min(first_token, x.t_first);
      last_token = std::max(last_token, x.t_last);
    }
  }
  if (csv != stdout) std::fclose(csv);
  // Steady aggregate: text chunks per second in the window where every client has had its first text
  // and none has had its last. With one request per client that is the stretch where all N streams
  // decode together — the batched decode rate without the prompts' prefill, which the
  // first-to-last-token aggregate above includes (N prompts prefilled inside the other streams' window).
  Clock::time_point all_started = Clock::time_point::min(), first_done = Clock::time_point::max();
  bool every_client = true;
  for (const auto& rs : results) {
    Clock::time_point c_first = Clock::time_point::max(), c_last = Clock::time_point::min();
    for (const RequestResult& x : rs)
      if (x.ok && !x.text_times.empty()) {
        c_first = std::min(c_first, x.text_times.front());
        c_last = std::max(c_last, x.text_times.back());
      }
    if (c_first == Clock::time_point::max()) every_client = false;
    all_started = std::max(all_started, c_first);
    first_done = std::min(first_done, c_last);
  }
  int64_t steady_chunks = 0;
  double steady_window = 0;
  if (every_client && first_done > all_started) {
    steady_window = std::chrono::duration<double>(first_done - all_started).count();
    for (const auto& rs : results)
      for (const RequestResult& x : rs)
        for (const auto& t : x.text_times) steady_chunks += (t > all_started && t <= first_done) ? 1 : 0;
  }
  const double steady = steady_window > 0 ? static_cast<double>(steady_chunks) / steady_window : 0;
  const double wall = std::chrono::duration<double>(t1 - t0).count();
  const double decode_window = ttft.empty() ? 0 : std::chrono::duration<double>(last_token - first_token).count();
  const double agg = decode_window > 0 ? static_cast<double>(total_tokens) / decode_window : 0;
  const double mean_rate = rate.empty() ? 0 : std::accumulate(rate.begin(), rate.end(), 0.0) / static_cast<double>(rate.size());
  const double mean_ttft = ttft.empty() ? 0 : std::accumulate(ttft.begin(), ttft.end(), 0.0) / static_cast<double>(ttft.size());
  std::fprintf(stderr,
               "ds4-loadgen: %d client(s) x %d request(s) on %zu server(s): %lld ok, %lld failed; %lld tokens in %.2f s\n"
               "  aggregate decode %.1f tok/s (tokens / first-to-last token), end-to-end %.1f tok/s\n"
               "  steady decode %.1f tok/s (%lld text chunks in the %.2f s all clients were streaming)\n"
               "  per-session decode mean %.1f tok/s (min %.1f, max %.1f)\n"
               "  TTFT mean %.3f s, p50 %.3f s, p90 %.3f s, max %.3f s\n",
               clients, requests, targets.size(), static_cast<long long>(ttft.size()), static_cast<long long>(failed),
               static_cast<long long>(total_tokens), wall, agg, wall > 0 ? static_cast<double>(total_tokens) / wall : 0,
               steady, static_cast<long long>(steady_chunks), steady_window, mean_rate, rate.empty() ? 0 : *std::min_element(rate.begin(), rate.end()),
               rate.empty() ? 0 : *std::max_element(rate.begin(), rate.end()), mean_ttft, pct(ttft, 0.5), pct(ttft, 0.9),
               pct(ttft, 1.0));
  if (!summary_path.empty()) {
    std::ifstream probe(summary_path);
    const bool fresh = !probe.good() || probe.peek() == std::ifstream::traits_type::eof();
    probe.close();
    std::FILE* s = std::fopen(summary_path.c_str(), "a");
    if (!s) {
      std::fprintf(stderr, "ds4-loadgen: cannot append to %s\n", summary_path.c_str());
      return 2;
    }
    if (fresh)
      std::fprintf(s, "label,servers,clients,requests,prompt_tokens,gen_tokens,ok,failed,tokens,wall_s,agg_decode_tok_s,"
                      "e2e_tok_s,mean_session_tok_s,ttft_mean_s,ttft_p50_s,ttft_p90_s,ttft_max_s,steady_decode_tok_s,"
                      "steady_window_s\n");
    std::fprintf(s, "%s,%zu,%d,%d,%lld,%lld,%zu,%lld,%lld,%.3f,%.2f,%.2f,%.2f,%.4f,%.4f,%.4f,%.4f,%.2f,%.3f\n", label.c_str(),
                 targets.size(), clients, requests, static_cast<long long>(prompt_tokens), static_cast<long long>(gen_tokens),
                 ttft.size(), static_cast<long long>(failed), static_cast<long long>(total_tokens), wall, agg,
                 wall > 0 ? static_cast<double>(total_tokens) / wall : 0, mean_rate, mean_ttft, pct(ttft, 0.5), pct(ttft, 0.9),
                 pct(ttft, 1.0), steady, steady_window);
    std::fclose(s);
  }
  return failed > 0 ? 1 : 0;
}
