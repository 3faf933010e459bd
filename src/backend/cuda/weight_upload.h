// weight_upload.h — copies weight tensors from the mmap'd GGUF into device memory fast: a ring of
// pinned staging buffers, host threads reading the mapping into them in parallel (the page faults of a
// tmpfs/page-cache mapping are what limits one thread, ~0.9 GB/s through cudaMemcpy's own staging), and
// asynchronous copies on a dedicated stream so the bus copy of one slot overlaps the reads of the next.
//
// Ordering: enqueue() makes the backend's compute stream wait for the copy, so kernels queued after a
// map_weight see the data; `host` must stay valid until then (the GGUF mapping outlives the backend).
// Each slot is allocated when first used, 4 MiB while the pieces it takes fit (small tensors: norms, a
// tiny model, a test's matrix), 64 MiB from the first piece that does not; all are released by
// release_staging() (the backend calls it on sync(): weights are bound before the first forward step).
// Sized by use because a caller that maps a small weight between syncs (the CUDA tests: thousands of
// times) paid 4 × 64 MiB of cudaHostAlloc + cudaFreeHost each time, most of test_cuda_ops' run time.
// Deliberately not here: device allocation and accounting (cuda_backend.cpp), kernels.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

namespace ds4::backend::cuda {

class WeightUploader {
 public:
  WeightUploader() = default;
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;
  ~WeightUploader();

  // Copies `bytes` from host `src` to device `dst`; `compute` waits for it. Returns the first CUDA
  // error (the copy may be incomplete then) and `what` names the call that failed.
  cudaError_t enqueue(void* dst, const void* src, uint64_t bytes, cudaStream_t compute, const char** what);

  // Waits for queued copies and frees the pinned ring and the copy stream (cheap when never used).
  cudaError_t release_staging();

 private:
  static constexpr int kSlots = 4;
  static constexpr uint64_t kSlotBytes = 64ull << 20;  // 4 × 64 MiB pinned: enough to keep the bus busy
  static constexpr uint64_t kSmallSlotBytes = 4ull << 20;

  cudaError_t ensure_ring(const char** what);
  // Slot s holds at least `bytes` (≤ kSlotBytes) afterwards; its previous copy must be done.
  cudaError_t fit_slot(int s, uint64_t bytes, const char** what);

  cudaStream_t stream_ = nullptr;
  std::array<void*, kSlots> slot_{};
  std::array<uint64_t, kSlots> cap_{};      // bytes allocated at slot_[i] (0: not yet)
  std::array<cudaEvent_t, kSlots> done_{};  // recorded after the device copy out of each slot
  std::array<bool, kSlots> pending_{};
  int next_ = 0;
  int threads_ = 0;
};

}  // namespace ds4::backend::cuda
