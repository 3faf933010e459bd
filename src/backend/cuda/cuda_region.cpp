// cuda_region.cpp — growable device memory for session KV rows (backend.h Region) with the CUDA
// virtual memory management API: cuMemAddressReserve takes address space for the session's context
// limit once; each block (the allocation granularity, 2 MiB on Hopper) is a cuMemCreate physical
// allocation mapped behind the previous one (cuMemMap + cuMemSetAccess) as rows are added, and unmapped
// and released when a rewind or reset drops it. Rows stay contiguous, so kernels need no block tables.
//
// The driver functions are reached through cudaGetDriverEntryPointByVersion (no link against libcuda,
// the runtime stays static). Without VMM support (old driver, device attribute off) regions fall back
// to one cudaMalloc per size change with a copy: data() then moves on growth, which KvState tolerates
// (it re-reads data() after every resize), at the cost of copies; the startup log says which mode runs.
// Deliberately not here: which rows a session needs (model/kv_state.cpp), block sizes (memory_plan).
#include <cuda.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_impl.h"
#include "modelspec/memory_plan.h"

namespace ds4::backend::cuda {

template <typename F>
static bool entry(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

static CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Loads the VMM entry points once per backend; on any failure the backend uses the copying fallback.
void CudaBackend::init_vmm() {
  if (vmm_checked_) return;
  vmm_checked_ = true;
  auto api = std::make_unique<VmmApi>();
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  if (!entry("cuDeviceGet", device_get) || !entry("cuDeviceGetAttribute", attribute) ||
      !entry("cuMemAddressReserve", api->reserve) || !entry("cuMemAddressFree", api->address_free) ||
      !entry("cuMemCreate", api->create) || !entry("cuMemRelease", api->release) || !entry("cuMemMap", api->map) ||
      !entry("cuMemUnmap", api->unmap) || !entry("cuMemSetAccess", api->set_access) ||
      !entry("cuMemGetAllocationGranularity", api->granularity))
    return;
  CUdevice dev = 0;
  int supported = 0;
  if (device_get(&dev, device_) != CUDA_SUCCESS ||
      attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS || !supported)
    return;
  const CUmemAllocationProp prop = device_prop(device_);
  size_t g = 0;
  if (api->granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) return;
  // The planner assumes kCudaKvBlockBytes; use it whenever the device's granularity divides it.
  block_bytes_ = modelspec::kCudaKvBlockBytes % g == 0 ? modelspec::kCudaKvBlockBytes : g;
  vmm_ = std::move(api);
}

bool CudaBackend::vmm_enabled() {
  init_vmm();
  return vmm_ != nullptr;
}

uint64_t CudaBackend::region_block_bytes() const { return block_bytes_; }

Result<Region> CudaBackend::reserve_region(uint64_t max_bytes, MemCategory cat) {
  init_vmm();
  Region::Parts p;
  p.reserved = modelspec::round_up(max_bytes, block_bytes_);
  if (vmm_ && p.reserved) {
    CUdeviceptr base = 0;
    if (vmm_->reserve(&base, p.reserved, block_bytes_, 0, 0) != CUDA_SUCCESS)
      return out_of_memory("cuda backend: cannot reserve " + std::to_string(p.reserved) +
                           " bytes of device address space for " + mem_category_name(cat));
    p.base = reinterpret_cast<void*>(base);
  }
  return Region(this, cat, std::move(p));
}

Status CudaBackend::resize_region(Region& r, uint64_t bytes) {
  Region::Parts& p = r.parts();
  const uint64_t want = modelspec::round_up(bytes, block_bytes_);
  if (want > p.reserved)
    return invalid_argument("cuda backend: " + std::to_string(bytes) + " bytes of " + mem_category_name(r.category()) +
                            " exceed the " + std::to_string(p.reserved) + " bytes reserved for the context limit");
  if (want == p.committed) return Status::Ok();
  if (!vmm_) {
    // Fallback: a fresh allocation of the new size; the kept bytes are copied on the stream.
    void* np = nullptr;
    if (want && cudaMalloc(&np, want) != cudaSuccess) {
      (void)cudaGetLastError();
      return out_of_memory("cuda backend: cannot allocate " + std::to_string(want) + " bytes for " +
                           mem_category_name(r.category()));
    }
    if (np && p.base) check(cudaMemcpyAsync(np, p.base, std::min(want, p.committed), cudaMemcpyDeviceToDevice, stream_),
                            "region copy");
    if (p.base) check(cudaFree(p.base), "region free");  // cudaFree waits for the copy
    counted_[r.category()] += want;
    counted_[r.category()] -= p.committed;
    p.base = np;
    p.committed = want;
    return first_error_;
  }
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(p.base);
  if (want > p.committed) {
    const CUmemAllocationProp prop = device_prop(device_);
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (uint64_t off = p.committed; off < want; off += block_bytes_) {
      CUmemGenericAllocationHandle h = 0;
      if (vmm_->create(&h, block_bytes_, &prop, 0) != CUDA_SUCCESS) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        (void)cudaGetLastError();
        return out_of_memory("cuda backend: cannot allocate a " + std::to_string(block_bytes_ >> 20) + " MiB block of " +
                             mem_category_name(r.category()) + "; the device has " + std::to_string(fr >> 20) +
                             " MiB free of " + std::to_string(tot >> 20));
      }
      if (vmm_->map(base + off, block_bytes_, 0, h, 0) != CUDA_SUCCESS ||
          vmm_->set_access(base + off, block_bytes_, &access, 1) != CUDA_SUCCESS) {
        vmm_->unmap(base + off, block_bytes_);
        vmm_->release(h);
        return internal_error("cuda backend: cannot map a KV block (cuMemMap/cuMemSetAccess)");
      }
      p.handles.push_back(h);
      p.committed = off + block_bytes_;
      counted_[r.category()] += block_bytes_;
    }
    return Status::Ok();
  }
  // Shrink: queued kernels may still read the rows being dropped.
  check(cudaStreamSynchronize(stream_), "region shrink synchronize");
  while (p.committed > want) {
    const uint64_t off = p.committed - block_bytes_;
    vmm_->unmap(base + off, block_bytes_);
    vmm_->release(p.handles.back());
    p.handles.pop_back();
    p.committed = off;
    counted_[r.category()] -= block_bytes_;
  }
  return Status::Ok();
}

void CudaBackend::release_region(Region& r) {
  Region::Parts& p = r.parts();
  if (!vmm_) {
    if (p.base) check(cudaFree(p.base), "region free");
  } else if (p.base) {
    check(cudaStreamSynchronize(stream_), "region release synchronize");
    const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(p.base);
    for (size_t i = 0; i < p.handles.size(); ++i) {
      vmm_->unmap(base + i * block_bytes_, block_bytes_);
      vmm_->release(p.handles[i]);
    }
    vmm_->address_free(base, p.reserved);
  }
  counted_[r.category()] -= p.committed;
  p = Region::Parts{};
}

}  // namespace ds4::backend::cuda
