// bench_loop.h — ds4-bench's measurement loop on the public engine API (include/ds4/engine.h):
// one session is prefilled incrementally to each frontier; at each frontier the state is
// snapshotted in RAM, `gen_tokens` greedy tokens are decoded (argmax with EOS excluded, so every
// frontier decodes the same count; picked on the device by Session::eval_greedy unless host_argmax), and the snapshot is restored before prefilling on. Memory is
// read at each frontier right after the prefill (before the decode), from the engine's accounting
// (Session::memory, Engine::memory_report) and the OS (VmRSS).
//
// Deliberately not here: flags, CSV formatting, plotting. Nothing here touches tensors or kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ds4/engine.h"
#include "ds4/memory.h"
#include "ds4/status.h"

namespace ds4::bench {

// One CSV row: the measurements at one frontier.
struct FrontierRow {
  int64_t frontier = 0;        // tokens held by the session after the prefill
  int64_t prefill_tokens = 0;  // tokens evaluated to reach it from the previous frontier
  double prefill_tps = 0;      // prefill_tokens / prefill wall time
  int64_t gen_tokens = 0;      // tokens decoded at this frontier (0 when decode is off)
  double gen_tps = 0;          // gen_tokens / decode wall time (0 when gen_tokens == 0)
  uint64_t kv_bytes = 0;       // session KV bytes (raw, compressed, indexer, frontier), host + device
  uint64_t snapshot_bytes = 0; // size of the in-RAM snapshot (0 when no snapshot was taken)
  uint64_t rss_bytes = 0;      // process VmRSS after the prefill
  uint64_t device_used_bytes = 0;  // driver's used bytes (total − free) when known, else counted device bytes
  MemBytes session;            // the session's bytes per category (host + device)
  MemBytes process;            // the whole process per category (host + device)
  // LoopOptions::profile: where the decode tokens' wall time went (seconds summed over gen_tokens).
  struct DecodeProfile {
    double wall = 0;       // the decode loop
    double argmax = 0;     // host scans of the logits (LoopOptions::host_argmax)
    StepTimes steps;       // the engine's pieces (EngineOptions::profile_steps), this frontier's decode only
  } profile;
};

struct LoopOptions {
  std::vector<int64_t> frontiers;  // increasing
  int64_t gen_tokens = 128;        // decode tokens per frontier; 0 = no snapshot and no decode
  int32_t chunk = 0;               // EvalOptions::chunk (0 = engine default)
  // Greedy tokens as before the device argmax: every step downloads its logits and the host scans them
  // (argmax, EOS excluded). Off: Session::eval_greedy (the token picked on the device, 4 bytes back).
  bool host_argmax = false;
  // Without host_argmax: the decode tokens through Session::generate_greedy (the device one step ahead of
  // the host, each token fed to the next step on the device); false: eval_greedy per token (ds4-bench
  // --overlap / --no-overlap).
  bool overlap = false;
  bool profile = false;            // fill FrontierRow::profile (the engine opened with profile_steps)
};

// The token sequence the session walks: `source` repeated as often as needed to reach `length`.
std::vector<TokenId> repeat_tokens(std::span<const TokenId> source, int64_t length);

// Runs the walk over `tokens` (at least frontiers.back() long); `on_row` is called after each
// frontier (the tool writes and flushes the CSV there, so a long run leaves partial results).
Status run_frontiers(Engine& engine, std::span<const TokenId> tokens, const LoopOptions& opts,
                     const std::function<void(const FrontierRow&)>& on_row);

}  // namespace ds4::bench
