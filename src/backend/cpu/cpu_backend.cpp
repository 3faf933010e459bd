// cpu_backend.cpp — CpuBackend construction, memory accounting and the scratch it owns.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "backend/cpu/cpu_impl.h"

namespace ds4::backend::cpu {

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opts) {
  int n = opts.n_threads > 0 ? opts.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  return std::make_unique<CpuBackend>(std::max(1, n));
}

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads), per_thread_(static_cast<size_t>(n_threads)) {}

Result<Buffer> CpuBackend::alloc(uint64_t bytes, MemCategory cat) {
  if (bytes == 0) return Buffer(this, nullptr, 0, cat);
  // 64-byte alignment keeps rows cache-line aligned; calloc-like zero fill.
  const uint64_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) return out_of_memory("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes for " +
                               mem_category_name(cat));
  std::memset(p, 0, rounded);
  counted_[cat] += bytes;
  return Buffer(this, p, bytes, cat);
}

void CpuBackend::release(void* ptr, uint64_t bytes, MemCategory cat) {
  std::free(ptr);
  counted_[cat] -= bytes;
}

Result<const void*> CpuBackend::map_weight(const void* host, uint64_t bytes) { return host; }

MemBytes CpuBackend::allocated() const {
  MemBytes m = counted_;
  m[MemCategory::scratch] += scratch_bytes_;
  return m;
}

void CpuBackend::upload(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, uint64_t bytes) { std::memmove(dst, src, bytes); }
void CpuBackend::fill_f32(float* dst, float value, int64_t count) { std::fill(dst, dst + count, value); }

void CpuBackend::add(float* y, const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}
void CpuBackend::scale(float* y, float s, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] *= s;
}

template <typename T>
static std::vector<T>& grow_vec(std::vector<T>& v, size_t n, uint64_t& counter) {
  if (v.size() < n) {
    counter -= v.capacity() * sizeof(T);
    const size_t want = std::max(n, v.size() * 3 / 2);
    v.resize(want);
    counter += v.capacity() * sizeof(T);
  }
  return v;
}

std::vector<float>& CpuBackend::grow(std::vector<float>& v, size_t n) { return grow_vec(v, n, scratch_bytes_); }
std::vector<uint8_t>& CpuBackend::grow(std::vector<uint8_t>& v, size_t n) { return grow_vec(v, n, scratch_bytes_); }
std::vector<int32_t>& CpuBackend::grow(std::vector<int32_t>& v, size_t n) { return grow_vec(v, n, scratch_bytes_); }

std::vector<std::vector<float>>& CpuBackend::thread_scratch(size_t n) {
  for (auto& v : per_thread_) grow(v, n);
  return per_thread_;
}

}  // namespace ds4::backend::cpu
