// kvstore_bench.cpp — save/restore bandwidth and per-entry overhead of the disk KV cache store,
// with payloads the size of ds4's snapshots (DS4_SERVER.md §3.2: ≈ 24.0 MB + 13,764 B/token).
// Not a ctest (it writes hundreds of MB); run: kvstore_bench [--dir PARENT] [--keep] [TOKENS...]
// (the cache goes to PARENT/ds4_kvstore_bench, default the system temp dir; --keep leaves it for
// `ds4 kvcache` to look at).
// Prints one line per size: save MB/s (checksums + write + fsync + rename), lookup MB/s (index
// probe + read + verify every checksum), file bytes, overhead bytes beyond the payload.
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kvstore/kvstore.h"

using namespace ds4::kvstore;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  std::string parent = std::filesystem::temp_directory_path().string();
  bool keep = false;
  std::vector<uint64_t> token_counts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      parent = argv[++i];
    } else if (a == "--keep") {
      keep = true;
    } else {
      token_counts.push_back(std::strtoull(argv[i], nullptr, 10));
    }
  }
  const std::string dir = parent + "/ds4_kvstore_bench";
  if (token_counts.empty()) token_counts = {2048, 8192};
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);

  StoreOptions o;
  o.dir = dir;
  o.space_bytes = uint64_t{64} << 30;
  std::string_view parts[] = {"bench-model"};
  o.model.fingerprint = ModelIdentity::fingerprint_of(parts);
  o.model.quant_family = 2;
  o.model.engine_version = "bench";
  auto store = Store::open(o);
  if (!store.ok()) {
    std::fprintf(stderr, "kvstore_bench: %s\n", store.status().to_string().c_str());
    return 1;
  }
  Store& s = **store;
  std::printf("%8s %12s %12s %10s %10s %10s %12s\n", "tokens", "payload_B", "file_B", "overhead_B", "save_MB/s",
              "load_MB/s", "B/token");
  std::mt19937_64 rng(1);
  for (uint64_t n : token_counts) {
    // Rendered text ≈ 4 bytes/token; logits 129280 f32; payload per ds4's snapshot size formula.
    std::string text(n * 4, 'a');
    for (auto& c : text) c = static_cast<char>('a' + rng() % 26);
    std::vector<int32_t> tokens(n);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 129280);
    std::vector<float> logits(129280);
    for (auto& l : logits) l = static_cast<float>(rng() % 1000) / 100.0f;
    std::vector<uint8_t> payload(24'000'000 + n * 13'764);
    for (size_t i = 0; i < payload.size(); i += 8) {
      uint64_t r = rng();
      std::memcpy(&payload[i], &r, std::min<size_t>(8, payload.size() - i));
    }
    SaveRequest req{text, tokens, logits, payload, SaveReason::cold, 65536};
    auto t0 = std::chrono::steady_clock::now();
    auto saved = s.save(req);
    const double save_s = seconds_since(t0);
    if (!saved.ok() || !saved->written) {
      std::fprintf(stderr, "kvstore_bench: save failed: %s\n", saved.ok() ? saved->skipped.c_str() : saved.status().to_string().c_str());
      return 1;
    }
    LookupRequest lr;
    std::string prompt = text + "<｜User｜>next turn";
    lr.prompt = prompt;
    t0 = std::chrono::steady_clock::now();
    auto hit = s.lookup(lr);
    const double load_s = seconds_since(t0);
    if (!hit.ok() || !hit->has_value() || (*hit)->entry.payload != payload) {
      std::fprintf(stderr, "kvstore_bench: lookup did not return the saved entry\n");
      return 1;
    }
    const uint64_t file = saved->file_bytes;
    const uint64_t overhead = file - payload.size();
    std::printf("%8llu %12zu %12llu %10llu %10.0f %10.0f %12.0f\n", static_cast<unsigned long long>(n), payload.size(),
                static_cast<unsigned long long>(file), static_cast<unsigned long long>(overhead),
                static_cast<double>(file) / 1e6 / save_s, static_cast<double>(file) / 1e6 / load_s,
                static_cast<double>(file) / static_cast<double>(n));
  }
  auto usage = s.usage_bytes();
  auto list = s.list();
  if (usage.ok() && list.ok()) {
    uint64_t entries = 0;
    for (const auto& e : *list) entries += e.file_bytes;
    std::printf("sidecar + index + lock bytes for %zu entries: %llu\n", list->size(),
                static_cast<unsigned long long>(*usage - entries));
  }
  if (!keep) std::filesystem::remove_all(dir, ec);
  return 0;
}
