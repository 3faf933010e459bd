// bench_loop.cpp — see bench_loop.h.
#include "bench_loop.h"

#include <chrono>
#include <fstream>
#include <string>

#include "ds4/sampler.h"

namespace ds4::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// VmRSS of this process, read here rather than taken from memory_report() so the figure is the one
// of the same instant as the other columns (the report's host_rss is also VmRSS).
uint64_t vm_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

MemBytes add(const MemBytes& a, const MemBytes& b) {
  MemBytes r;
  for (int i = 0; i < kMemCategoryCount; ++i) r.bytes[i] = a.bytes[i] + b.bytes[i];
  return r;
}

// The categories that make up a session's KV state (MODEL.md §10.1); `other` (token ids, logits)
// and scratch are not KV.
uint64_t kv_bytes_of(const MemBytes& m) {
  return m[MemCategory::raw_kv] + m[MemCategory::compressed_kv_r4] + m[MemCategory::compressed_kv_rhc] +
         m[MemCategory::indexer_kv] + m[MemCategory::compressor_state];
}

}  // namespace

std::vector<TokenId> repeat_tokens(std::span<const TokenId> source, int64_t length) {
  std::vector<TokenId> out;
  if (source.empty() || length <= 0) return out;
  out.reserve(static_cast<size_t>(length));
  while (static_cast<int64_t>(out.size()) < length) {
    const size_t take = std::min(source.size(), static_cast<size_t>(length) - out.size());
    out.insert(out.end(), source.begin(), source.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return out;
}

Status run_frontiers(Engine& engine, std::span<const TokenId> tokens, const LoopOptions& opts,
                     const std::function<void(const FrontierRow&)>& on_row) {
  if (opts.frontiers.empty()) return invalid_argument("ds4-bench: no frontiers to measure");
  if (static_cast<int64_t>(tokens.size()) < opts.frontiers.back())
    return invalid_argument("ds4-bench: token sequence (" + std::to_string(tokens.size()) +
                            ") is shorter than the last frontier (" + std::to_string(opts.frontiers.back()) + ")");
  // The session takes the engine's limit (--ctx-alloc), as ds4-bench allocates its context once.
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, engine.new_session());
  Session& s = *session;
  const int64_t need = opts.frontiers.back() + opts.gen_tokens;
  if (s.max_context() < need)
    return invalid_argument("ds4-bench: the session's context limit (" + std::to_string(s.max_context()) +
                            ") is below the last frontier plus the decode tokens (" + std::to_string(need) +
                            "); raise --ctx-alloc");
  const TokenId eos = engine.tokenizer().eos_id();
  EvalOptions eo;
  eo.chunk = opts.chunk;

  int64_t prev = 0;
  for (const int64_t frontier : opts.frontiers) {
    if (frontier <= prev) return invalid_argument("ds4-bench: frontiers must increase");
    FrontierRow row;
    row.frontier = frontier;
    row.prefill_tokens = frontier - prev;
    const auto t0 = Clock::now();
    DS4_RETURN_IF_ERROR(s.eval(tokens.subspan(static_cast<size_t>(prev), static_cast<size_t>(frontier - prev)), eo)
                            .with_context("prefill to " + std::to_string(frontier)));
    const double t_prefill = seconds_since(t0);
    row.prefill_tps = t_prefill > 0 ? static_cast<double>(row.prefill_tokens) / t_prefill : 0;

    // Memory at the frontier, before the snapshot and the decode add anything.
    const SessionMemory sm = s.memory();
    row.session = add(sm.host, sm.device);
    row.kv_bytes = kv_bytes_of(row.session);
    const MemoryReport rep = engine.memory_report();
    row.process = add(rep.host, rep.device);
    row.rss_bytes = vm_rss_bytes();
    row.device_used_bytes = rep.device_total > 0 ? rep.device_total - rep.device_free : rep.device.total();

    if (opts.gen_tokens > 0) {
      DS4_ASSIGN_OR_RETURN(SessionSnapshot snap, s.snapshot());
      row.snapshot_bytes = snap.bytes.size();
      engine.reset_step_times();
      const auto t1 = Clock::now();
      // The first token comes from the prefill's logits; each decode step then yields the next one.
      TokenId next = argmax(s.logits(), eos);
      double t_argmax = 0;
      if (next < 0) return internal_error("ds4-bench: the model returned no logits");
      const auto what = [&] { return "decode at " + std::to_string(frontier); };
      if (!opts.host_argmax && opts.overlap) {
        DS4_RETURN_IF_ERROR(s.generate_greedy(next, opts.gen_tokens, eos, [](TokenId) { return true; }, eo)
                                .with_context(what()));
      } else {
        for (int64_t i = 0; i < opts.gen_tokens; ++i) {
          if (next < 0) return internal_error("ds4-bench: the model returned no logits");
          const TokenId cur = next;
          if (opts.host_argmax) {
            DS4_RETURN_IF_ERROR(s.eval(std::span<const TokenId>(&cur, 1), eo).with_context(what()));
            const auto ta = opts.profile ? Clock::now() : Clock::time_point{};
            next = argmax(s.logits(), eos);
            if (opts.profile) t_argmax += seconds_since(ta);
          } else {
            DS4_RETURN_IF_ERROR(s.eval_greedy(std::span<const TokenId>(&cur, 1), &next, eos, eo).with_context(what()));
          }
        }
      }
      const double t_gen = seconds_since(t1);
      if (opts.profile) row.profile = {t_gen, t_argmax, engine.step_times()};
      row.gen_tokens = opts.gen_tokens;
      row.gen_tps = t_gen > 0 ? static_cast<double>(opts.gen_tokens) / t_gen : 0;
      DS4_RETURN_IF_ERROR(s.restore(snap).with_context("restore at " + std::to_string(frontier)));
    }
    on_row(row);
    prev = frontier;
  }
  return Status::Ok();
}

}  // namespace ds4::bench
