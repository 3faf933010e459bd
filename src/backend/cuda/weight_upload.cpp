// weight_upload.cpp — see weight_upload.h.
#include "backend/cuda/weight_upload.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace ds4::backend::cuda {

WeightUploader::~WeightUploader() { (void)release_staging(); }

cudaError_t WeightUploader::ensure_ring(const char** what) {
  if (stream_) return cudaSuccess;
  threads_ = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    stream_ = nullptr;
    *what = "upload stream create";
    return e;
  }
  for (int i = 0; i < kSlots; ++i) {
    e = cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming);
    if (e != cudaSuccess) {
      *what = "upload event create";
      return e;
    }
  }
  return cudaSuccess;
}

cudaError_t WeightUploader::fit_slot(int s, uint64_t bytes, const char** what) {
  if (cap_[s] >= bytes) return cudaSuccess;
  if (slot_[s]) cudaFreeHost(slot_[s]);
  slot_[s] = nullptr;
  cap_[s] = 0;
  const uint64_t cap = bytes <= kSmallSlotBytes ? kSmallSlotBytes : kSlotBytes;
  const cudaError_t e = cudaHostAlloc(&slot_[s], cap, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    slot_[s] = nullptr;
    *what = "pinned staging allocation";
    return e;
  }
  cap_[s] = cap;
  return cudaSuccess;
}

// memcpy split over `threads` host threads in 2 MiB-aligned pieces (each thread faults its own pages).
static void parallel_copy(void* dst, const void* src, uint64_t bytes, int threads) {
  constexpr uint64_t kMin = 4ull << 20;
  const int t = static_cast<int>(std::min<uint64_t>(threads, (bytes + kMin - 1) / kMin));
  if (t <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const uint64_t part = ((bytes + t - 1) / t + (2ull << 20) - 1) & ~((2ull << 20) - 1);
  std::vector<std::thread> pool;
  pool.reserve(t);
  for (int i = 0; i < t; ++i) {
    const uint64_t off = part * i;
    if (off >= bytes) break;
    const uint64_t n = std::min(part, bytes - off);
    pool.emplace_back([=] { std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, n); });
  }
  for (auto& th : pool) th.join();
}

cudaError_t WeightUploader::enqueue(void* dst, const void* src, uint64_t bytes, cudaStream_t compute,
                                    const char** what) {
  if (bytes == 0) return cudaSuccess;
  cudaError_t e = ensure_ring(what);
  if (e != cudaSuccess) return e;
  for (uint64_t off = 0; off < bytes; off += kSlotBytes) {
    const uint64_t n = std::min(kSlotBytes, bytes - off);
    const int s = next_;
    next_ = (next_ + 1) % kSlots;
    if (pending_[s]) {  // the slot's previous device copy must be done before it is overwritten
      e = cudaEventSynchronize(done_[s]);
      pending_[s] = false;
      if (e != cudaSuccess) {
        *what = "upload wait";
        return e;
      }
    }
    e = fit_slot(s, n, what);
    if (e != cudaSuccess) return e;
    parallel_copy(slot_[s], static_cast<const char*>(src) + off, n, threads_);
    e = cudaMemcpyAsync(static_cast<char*>(dst) + off, slot_[s], n, cudaMemcpyHostToDevice, stream_);
    if (e == cudaSuccess) e = cudaEventRecord(done_[s], stream_);
    if (e != cudaSuccess) {
      *what = "weight copy";
      return e;
    }
    pending_[s] = true;
  }
  // The copy stream runs in order, so waiting for its latest event covers every earlier copy too.
  const int last = (next_ + kSlots - 1) % kSlots;
  e = cudaStreamWaitEvent(compute, done_[last], 0);
  if (e != cudaSuccess) *what = "compute stream wait for upload";
  return e;
}

cudaError_t WeightUploader::release_staging() {
  if (!stream_) return cudaSuccess;
  cudaError_t first = cudaStreamSynchronize(stream_);
  for (int i = 0; i < kSlots; ++i) {
    if (slot_[i]) {
      const cudaError_t e = cudaFreeHost(slot_[i]);
      if (first == cudaSuccess) first = e;
    }
    if (done_[i]) cudaEventDestroy(done_[i]);
    slot_[i] = nullptr;
    cap_[i] = 0;
    done_[i] = nullptr;
    pending_[i] = false;
  }
  cudaStreamDestroy(stream_);
  stream_ = nullptr;
  next_ = 0;
  return first;
}

}  // namespace ds4::backend::cuda
