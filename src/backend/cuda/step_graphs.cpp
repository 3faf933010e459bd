// step_graphs.cpp — CudaBackend::graph_begin / graph_end (backend.h "step graphs"): a small cache of
// recorded steps keyed by what fixes every kernel argument of the step, replayed as one CUDA graph launch
// instead of ~1,800 host launches per token.
//
// Policy per key: the first run is eager (it sizes every scratch area and does the one-time setup —
// shared-memory limits, device attributes — outside any recording); the second is recorded (stream
// capture, thread-local mode), instantiated and launched; later runs replay it. A recording that fails
// for any reason (an error, a scratch area that would have to grow, the driver refusing a call inside
// capture) is discarded before anything ran — graph_end returns false and the caller enqueues the ops
// eagerly — and its key is marked unrecordable. Scratch growth after a recording bumps scratch_gen_:
// graphs of an older generation point at freed memory and are re-recorded on next use. At most
// max_graphs_ recorded graphs and max_graphs_ keys seen once are kept, each set evicting its least
// recently used: a burst of one-off keys (a batched step with a prefill chunk of an odd size) forgets
// other one-off keys, never a recorded graph that steady decoding replays.
// What an instantiated graph holds on the device is measured as the drop of free device memory across
// cudaGraphInstantiate (kernel-only graphs hold no allocations of ours; the driver's own is what shows).
// Keys begin with the id of their owner (Backend::graph_owner, one per Forward); graph_release drops an
// owner's entries when it goes, so no graph outlives the scratch it points at.
// Deliberately not here: deciding what goes into a key or which steps are recordable (the forward pass
// knows which of its arguments vary per step).
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

void CudaBackend::drop_graph(StepGraph& g) {
  if (g.exec) cudaGraphExecDestroy(g.exec);
  g.exec = nullptr;
  graph_bytes_ -= g.device_bytes;
  g.device_bytes = 0;
}

// Evicts the least recently used entry with (recorded) or without a graph when that set is full; never
// `keep` (graphs_ is a list, so references to the other entries stay valid).
void CudaBackend::evict_graph_lru(bool recorded, const StepGraph* keep) {
  int64_t in_set = 0;
  auto lru = graphs_.end();
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if ((it->exec != nullptr) != recorded || &*it == keep) continue;
    ++in_set;
    if (lru == graphs_.end() || it->last_use < lru->last_use) lru = it;
  }
  if (in_set < max_graphs_ || lru == graphs_.end()) return;
  drop_graph(*lru);
  graphs_.erase(lru);
}

Backend::GraphMode CudaBackend::graph_begin(std::span<const int64_t> key) {
  join();  // a step left unjoined (an error half-way) must not leak its side lane into this one
  if (max_graphs_ <= 0 || failed() || recording_ || key.empty()) return GraphMode::eager;
  ++graph_clock_;
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const StepGraph& g) {
    return g.key.size() == key.size() && std::equal(key.begin(), key.end(), g.key.begin());
  });
  if (it == graphs_.end()) {  // first sight: run eagerly (sizes scratch), remember the key
    evict_graph_lru(false, nullptr);
    StepGraph g;
    g.key.assign(key.begin(), key.end());
    g.last_use = graph_clock_;
    graphs_.push_back(std::move(g));
    return GraphMode::eager;
  }
  StepGraph& g = *it;
  g.last_use = graph_clock_;
  if (g.unrecordable) return GraphMode::eager;
  if (g.exec && g.scratch_gen != scratch_gen_) drop_graph(g);  // points at scratch freed since
  if (g.exec) {
    check(cudaGraphLaunch(g.exec, stream_), "graph launch");
    ++graphs_replayed_;
    return GraphMode::replayed;
  }
  evict_graph_lru(true, &g);  // room among the recorded graphs for this one
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    g.unrecordable = true;
    return GraphMode::eager;
  }
  recording_ = &g;
  capture_error_ = Status::Ok();
  return GraphMode::recording;
}

bool CudaBackend::graph_end() {
  join();                        // a capture ends only with every forked stream joined back
  if (!recording_) return true;  // the ops ran eagerly
  StepGraph& g = *recording_;
  recording_ = nullptr;
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  bool ok = e == cudaSuccess && graph != nullptr && capture_error_.ok();
  size_t free_before = 0, free_after = 0, total = 0;
  bool measured = ok && cudaMemGetInfo(&free_before, &total) == cudaSuccess;
  // Lanes of different priorities (CudaBackendOptions::branch_priority): each kernel keeps its lane's
  // captured priority instead of taking the launch stream's.
  int main_prio = 0, side_prio = 0;
  const bool prio = side_stream_ && cudaStreamGetPriority(stream_, &main_prio) == cudaSuccess &&
                    cudaStreamGetPriority(side_stream_, &side_prio) == cudaSuccess && main_prio != side_prio;
  const unsigned long long flags = prio ? cudaGraphInstantiateFlagUseNodePriority : 0;
  if (ok) ok = cudaGraphInstantiate(&exec, graph, flags) == cudaSuccess;
  if (ok && measured) measured = cudaMemGetInfo(&free_after, &total) == cudaSuccess;
  if (ok && !measured) (void)cudaGetLastError();  // a failed query is no error of the step's
  if (ok && measured && free_after < free_before) g.device_bytes = free_before - free_after;
  if (graph) cudaGraphDestroy(graph);
  if (!ok) {
    (void)cudaGetLastError();  // a capture error is not sticky; the eager rerun reports real ones
    if (exec) cudaGraphExecDestroy(exec);
    capture_error_ = Status::Ok();
    g.unrecordable = true;
    return false;
  }
  g.exec = exec;
  g.scratch_gen = scratch_gen_;
  graph_bytes_ += g.device_bytes;
  ++graphs_recorded_;
  check(cudaGraphLaunch(g.exec, stream_), "graph launch");
  return true;
}

void CudaBackend::graph_release(int64_t owner) {
  // Keys begin with their owner's id (Backend::graph_owner). An entry being recorded stays: its owner is
  // still enqueueing into it (graph_end / graph_cancel retire it).
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (&*it != recording_ && !it->key.empty() && it->key[0] == owner) {
      drop_graph(*it);
      it = graphs_.erase(it);
    } else {
      ++it;
    }
  }
}

void CudaBackend::graph_cancel() {
  join();
  if (!recording_) return;
  StepGraph& g = *recording_;
  recording_ = nullptr;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) != cudaSuccess) (void)cudaGetLastError();
  if (graph) cudaGraphDestroy(graph);
  capture_error_ = Status::Ok();
  g.unrecordable = true;
}

GraphStats graph_stats(const Backend& be) {
  auto* c = dynamic_cast<const CudaBackend*>(&be);
  if (!c) return {};
  GraphStats st{c->graphs_recorded(), c->graphs_replayed()};
  st.kept = c->graphs_kept();
  st.device_bytes = c->graph_device_bytes();
  return st;
}

}  // namespace ds4::backend::cuda
