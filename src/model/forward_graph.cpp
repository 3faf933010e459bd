// forward_graph.cpp — the forward pass's side of step graphs (ForwardOptions::graphs,
// Backend::graph_begin): which steps may be recorded, the key that fixes every argument their ops take
// by value, and the record / replay bracket around Forward::run_step.
//
// A step is recordable when no segment emits a compressed row (emission launches the emitted rows'
// norm/RoPE/rounding ops on host-chosen row pointers and advances the host's row count; for one token
// per session that is 3 steps in 4 at ratio 4 and 127 in 128 at ratio 128). Everything else a recorded
// step reads per step comes from the step inputs uploaded before recording: token ids, positions, rows
// visible per column, and — for a recordable step even of one session — the per-column raw / compressed
// / indexer row tables and the compressor segment table (each session's pos0, frontier and output rows).
// Other steps (prefill chunks, emitting steps) keep the one-session by-value path and its kernels.
// So the key is only the step's shape: columns per segment and which want logits, the host bounds of
// compressed rows rounded up to kGraphRowBucket (they pick the attention split shape, the indexer grid
// and scratch sizes; the kernels bound every query by its own device count, so the same bits), whether
// the indexer selects, the raw ring and frontier sizes, and which ping-pong buffer holds the HC state.
// Session identity is not part of it: no session pointer is read by value when the tables are on.
// Deliberately not here: the graph cache itself (the backend's), emission on the device (a recordable
// emitting step would need the emitted rows' ops to take their rows and count from the device).
#include <algorithm>

#include "model/forward.h"

namespace ds4::model {

int64_t Forward::row_bound(int64_t rows) const {
  if (!opts_.graphs) return rows;
  return std::max<int64_t>(kGraphRowBucket, (rows + kGraphRowBucket - 1) / kGraphRowBucket * kGraphRowBucket);
}

bool Forward::graph_recordable(std::span<const Segment> segs) const {
  if (!opts_.graphs || opts_.max_chunk < 2) return false;  // the tables need room for two columns
  for (const Segment& sg : segs) {
    const int64_t after = sg.pos0 + static_cast<int64_t>(sg.tokens.size());
    for (int64_t r : ratios_)
      if (after / r != sg.pos0 / r) return false;  // emits a compressed row this step
  }
  return true;
}

void Forward::graph_step_key(std::span<const Segment> segs, int64_t n) {
  std::vector<int64_t>& k = graph_key_;
  k.clear();
  k.push_back(n);
  k.push_back(static_cast<int64_t>(segs.size()));
  for (const Segment& sg : segs) {
    k.push_back(static_cast<int64_t>(sg.tokens.size()));
    k.push_back(sg.all_logits ? 1 : 0);
  }
  k.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(x_.data())));
  k.push_back(segs[0].kv->geometry().raw_cap);
  for (int64_t r : ratios_) {
    int64_t rows = 0;
    for (const Segment& sg : segs) rows = std::max<int64_t>(rows, (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / r);
    k.push_back(row_bound(rows));
    k.push_back(rows > static_cast<int64_t>(cfg_.indexer_top_k) ? 1 : 0);  // any_select of this ratio's indexer layers
  }
  for (size_t l = 0; l < plan_.size(); ++l)
    if (plan_[l].has_compressor) k.push_back(segs[0].kv->layers()[l].slots);
}

Status Forward::run_step_graphed(std::span<const Segment> segs, int64_t n) {
  switch (be_.graph_begin(graph_key_)) {
    case backend::Backend::GraphMode::replayed:
      return Status::Ok();
    case backend::Backend::GraphMode::eager:
      return run_step(segs, n);
    case backend::Backend::GraphMode::recording:
      break;
  }
  if (Status st = run_step(segs, n); !st.ok()) {
    be_.graph_cancel();  // nothing of the recording ran
    return st;
  }
  if (be_.graph_end()) return Status::Ok();
  return run_step(segs, n);  // the recording was discarded before anything ran: enqueue the ops now
}

}  // namespace ds4::model
