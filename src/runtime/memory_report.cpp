// memory_report.cpp — Engine::memory_report and Session::memory: the counted bytes by category (every
// backend allocation is counted where it is made; the mapped GGUF and the tokenizer are added here),
// reconciled against the OS (VmRSS, mincore of the weight mapping) and the driver (cudaMemGetInfo),
// with what the counts do not explain reported as its own figure.
// Deliberately not here: the formulas (modelspec/memory_plan), presentation (server, tools).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#ifdef DS4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "ds4/plan.h"
#include "modelspec/memory_plan.h"
#include "runtime/engine_impl.h"

namespace ds4 {

static uint64_t proc_field_kib(const char* path, const char* key) {
  std::ifstream f(path);
  std::string line;
  const std::string k = key;
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::strtoull(line.c_str() + k.size(), nullptr, 10) * 1024;
  return 0;
}

HostMemory host_memory() {
  return {proc_field_kib("/proc/meminfo", "MemTotal:"), proc_field_kib("/proc/meminfo", "MemAvailable:")};
}

}  // namespace ds4

namespace ds4::runtime {

// Bytes of [p, p+n) that are resident in RAM (mincore, page granularity).
static uint64_t resident_bytes(const void* p, uint64_t n) {
  if (!p || !n) return 0;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  uint64_t resident = 0;
  std::vector<unsigned char> vec(1 << 16);
  for (uintptr_t a = start; a < end;) {
    const uint64_t pages = std::min<uint64_t>(vec.size(), (end - a + page - 1) / page);
    if (mincore(reinterpret_cast<void*>(a), pages * page, vec.data()) != 0) return 0;
    for (uint64_t i = 0; i < pages; ++i) resident += (vec[i] & 1) ? page : 0;
    a += pages * page;
  }
  return std::min<uint64_t>(resident, n + page);
}

// The data section of the mapped GGUF (where every tensor lives).
static std::pair<const void*, uint64_t> weight_mapping(const gguf::File& f) {
  for (const auto& t : f.tensors()) {
    const uint8_t* data = f.tensor(t).data;
    if (!data) continue;
    return {data - t.offset, f.file_size() - f.data_offset()};
  }
  return {nullptr, 0};
}

MemoryReport EngineImpl::memory_report() const {
  MemoryReport r;
  const bool host_be = backend_->host_memory();
  MemBytes& be_side = host_be ? r.host : r.device;
  be_side = backend_->allocated();  // small float weights, scratch, every session's KV
  r.host[MemCategory::weights] += weights_.mapped_bytes;
  r.host[MemCategory::other] += tokenizer_->memory_bytes();
#ifdef DS4_HAVE_CUDA
  if (!host_be) {
    r.device[MemCategory::weights] += backend::cuda::weight_upload_stats(*backend_).bytes;  // device copies
    const auto info = backend::cuda::device_info(*backend_);
    r.device_total = info.total;
    r.device_free = info.free;
    r.device_unexplained = static_cast<int64_t>(info.total - info.free) - static_cast<int64_t>(r.device.total());
  }
#endif
  for (const SessionImpl* s : sessions_) {
    SessionMemory m = s->memory();
    r.host[MemCategory::other] += m.host[MemCategory::other];
    r.sessions.push_back(m);
  }
  r.host_rss = proc_field_kib("/proc/self/status", "VmRSS:");
  r.host_mapped_weights = weights_.mapped_bytes;
  const auto [base, len] = weight_mapping(*file_);
  const auto now = std::chrono::steady_clock::now();
  if (len < (uint64_t{1} << 30) || now - resident_at_ > std::chrono::seconds(2)) {
    resident_cache_ = std::min<uint64_t>(resident_bytes(base, len), weights_.mapped_bytes);
    resident_at_ = now;
  }
  r.host_weights_resident = resident_cache_;
  r.host_unexplained = static_cast<int64_t>(r.host_rss) -
                       static_cast<int64_t>(r.host.total() - r.host_mapped_weights + r.host_weights_resident);
  r.kv_bytes_per_token = modelspec::kv_bytes_per_token(cfg_, forward_->plan());
  r.kv_block_bytes = backend_->region_block_bytes();
  return r;
}

SessionMemory SessionImpl::memory() const {
  SessionMemory m;
  m.session_id = id_;
  m.tokens = position();
  (engine_.forward_backend()->host_memory() ? m.host : m.device) = kv_.bytes();
  m.host[MemCategory::other] += tokens_.capacity() * sizeof(TokenId) + logits_.capacity() * sizeof(float);
  return m;
}

}  // namespace ds4::runtime
