// branches.cpp — CudaBackend::fork / resume_main / join (backend.h "concurrent branches"): a second
// stream, the side lane, that runs a run of ops beside the main stream's, ordered by two events.
//
// fork records an event on the main stream after what it holds so far and makes the side stream wait
// on it; ops then enqueue on the side stream. join records an event on the side stream and makes the
// main stream wait on it. Under stream capture (step_graphs.cpp) the event wait pulls the side stream
// into the capture, so a recorded step holds the two lanes as parallel branches of one graph; join
// before the capture ends is what makes it legal (graph_end joins first). Host-launched steps get the
// same order from the same events.
// The lanes keep apart whatever an op allocates for itself: the per-op scratch areas (quantized
// activations, expert groups and hidden rows, indexer scores, attention partials) are swapped together
// with stream_ while the side lane runs, so the op files need not know about lanes. Memory the forward
// pass hands to the ops is the caller's to keep disjoint (forward.cpp writes its audit at each fork).
// Deliberately not here: which ops go on which lane (the forward pass), more than one side lane.
#include <utility>

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

std::array<DeviceScratch*, CudaBackend::kScratchAreas> CudaBackend::scratch_areas() {
  return {&act_, &moe_act_, &moe_g_, &moe_u_, &moe_h_act_, &moe_y_, &idx_scores_, &moe_groups_, &attn_part_, &attn_seg_,
          &f16_part_, &hc_done_};
}

void CudaBackend::swap_lanes() {
  std::swap(stream_, side_stream_);
  const auto areas = scratch_areas();
  for (int i = 0; i < kScratchAreas; ++i) std::swap(*areas[static_cast<size_t>(i)], side_scratch_[static_cast<size_t>(i)]);
  on_side_ = !on_side_;
}

Status CudaBackend::set_branches(bool on) {
  join();
  branches_ = false;
  if (!on) return Status::Ok();
  if (!side_stream_) {
    // The side lane at the lowest priority (the default one): below the main stream when make_cuda_backend
    // gave that the highest (CudaBackendOptions::branch_priority), else equal to it.
    int least = 0, greatest = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&side_stream_, cudaStreamNonBlocking, least);
    if (e == cudaSuccess && !fork_event_) e = cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming);
    if (e == cudaSuccess && !join_event_) e = cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      release_branches();
      return unavailable(std::string("cuda backend: side stream for concurrent branches: ") + cudaGetErrorString(e));
    }
  }
  branches_ = true;
  return Status::Ok();
}

void CudaBackend::release_branches() {
  if (on_side_) swap_lanes();  // the main lane's stream and scratch back in their members
  if (side_stream_) {
    cudaStreamSynchronize(side_stream_);
    cudaStreamDestroy(side_stream_);
  }
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  side_stream_ = nullptr;
  fork_event_ = join_event_ = nullptr;
  for (DeviceScratch& s : side_scratch_) {
    if (s.ptr) {
      cudaFree(s.ptr);
      scratch_bytes_ -= s.bytes;
    }
    s = {};
  }
  branches_ = on_side_ = side_pending_ = false;
}

void CudaBackend::fork() {
  if (!branches_ || on_side_) return;  // off, or already on the side lane (its ops stay in order there)
  // The main stream is stream_ here. A failed event call leaves the lanes unswapped: everything stays in
  // order on the main stream (the error is recorded and reported by sync()).
  if (!check(cudaEventRecord(fork_event_, stream_), "fork event") ||
      !check(cudaStreamWaitEvent(side_stream_, fork_event_, 0), "fork wait"))
    return;
  swap_lanes();
  side_pending_ = true;
}

void CudaBackend::resume_main() {
  if (on_side_) swap_lanes();
}

void CudaBackend::join() {
  resume_main();
  if (!side_pending_) return;
  side_pending_ = false;
  // stream_ is the main stream again, side_stream_ the side lane's.
  if (check(cudaEventRecord(join_event_, side_stream_), "join event"))
    check(cudaStreamWaitEvent(stream_, join_event_, 0), "join wait");
}

}  // namespace ds4::backend::cuda
