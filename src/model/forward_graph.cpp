// forward_graph.cpp — the forward pass's side of step graphs (ForwardOptions::graphs,
// Backend::graph_begin): which steps may be recorded, the key that fixes every argument their ops take
// by value, and the record / replay bracket around Forward::run_step.
//
// Recorded: every step of one decode token, and every step of several sessions (mixed prefill chunks
// and decode tokens included). Such a step passes session state through the step inputs uploaded
// before recording: token ids, positions, rows visible per column, the per-column raw / compressed /
// indexer row tables, the compressor segment table (each session's pos0, frontier and output rows), and
// the rows emitted this step (count, RoPE positions, addresses), which the ops finishing emitted rows
// read on the device and skip past the count. So the key is only the step's shape: columns per segment
// and which want logits or a greedy token (with its excluded id, which the argmax takes by value), the
// host bounds of compressed rows rounded up by row_bound (they pick the attention split shape, the indexer grid and scratch sizes; the kernels bound every query by its own
// device count, so the same bits), whether the indexer selects, whether each ratio emits any row (the
// finishing ops are launched only then, over all n columns), the raw ring and frontier sizes, and which
// ping-pong buffer holds the HC state, all after this Forward's owner id (Backend::graph_owner): scratch
// addresses alone could match a freed Forward's, whose graphs the destructor drops. Session identity and KV buffer addresses are not part of it: no
// session pointer is read by value when the tables are on (KV growth moves nothing a graph holds).
// One session's prefill chunk keeps the one-session by-value path and its kernels.
// Deliberately not here: the graph cache itself (the backend's).
#include <algorithm>

#include "model/forward.h"

namespace ds4::model {

int64_t Forward::row_bound(int64_t rows) const {
  if (!opts_.graphs) return rows;
  int64_t p = kGraphRowBucket;  // the power of two ≤ rows (at least the first bucket)
  while (p <= rows / 2) p *= 2;
  const int64_t step = std::max<int64_t>(kGraphRowBucket, p / 4);
  return std::max<int64_t>(kGraphRowBucket, (rows + step - 1) / step * step);
}

bool Forward::graph_recordable(std::span<const Segment> segs) const {
  if (!opts_.graphs || opts_.max_chunk < 2) return false;  // the tables need room for two columns
  // One session's prefill chunk keeps the by-value path (its parallel compressor; a chunk is GEMM-bound,
  // launch gaps matter little); decode tokens and every step of several sessions are recorded.
  return segs.size() > 1 || segs[0].tokens.size() == 1;
}

Forward::~Forward() {
  if (graph_owner_ != 0) be_.graph_release(graph_owner_);  // before our scratch, which the graphs point at, goes
}

void Forward::graph_step_key(std::span<const Segment> segs, int64_t n) {
  std::vector<int64_t>& k = graph_key_;
  k.clear();
  k.push_back(graph_owner_);
  k.push_back(n);
  k.push_back(static_cast<int64_t>(segs.size()));
  for (const Segment& sg : segs) {
    k.push_back(static_cast<int64_t>(sg.tokens.size()));
    k.push_back(sg.all_logits ? 1 : 0);
    k.push_back(sg.token_out ? 1 + int64_t{sg.exclude} : -1);  // greedy (its excluded id, by value) or not
  }
  k.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(x_.data())));
  k.push_back(segs[0].kv->geometry().raw_cap);
  for (size_t r = 0; r < ratios_.size(); ++r) {
    int64_t rows = 0;
    for (const Segment& sg : segs)
      rows = std::max<int64_t>(rows, (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / ratios_[r]);
    k.push_back(row_bound(rows));
    k.push_back(rows > static_cast<int64_t>(cfg_.indexer_top_k) ? 1 : 0);  // any_select of this ratio's indexer layers
    k.push_back(emit_bound_[r]);  // whether the emitted rows' ops are launched (upload_step_inputs)
  }
  for (size_t l = 0; l < plan_.size(); ++l)
    if (plan_[l].has_compressor) k.push_back(segs[0].kv->layers()[l].slots);
}

// A replayed step ran its ops from the graph, but run_step's host side did not run: each session's count of
// compressed rows (LayerKv::n_comp, which compressed_rows advances when a row is emitted) must advance as it
// would have — snapshots, trim() and restore read it. Without this a session whose emitting steps replayed
// kept a stale count: its snapshot lacked rows, and trim() could drop rows the device had written.
void Forward::replayed_host_state(std::span<const Segment> segs) {
  for (const Segment& sg : segs)
    for (size_t l = 0; l < plan_.size(); ++l) {
      if (!plan_[l].has_compressor) continue;
      const int64_t r = plan_[l].compress_ratio;
      const int64_t first = sg.pos0 / r, after = (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / r;
      if (after > first) sg.kv->layers()[l].n_comp = after;
    }
}

Status Forward::run_step_graphed(std::span<const Segment> segs, int64_t n) {
  switch (be_.graph_begin(graph_key_)) {
    case backend::Backend::GraphMode::replayed:
      replayed_host_state(segs);
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
