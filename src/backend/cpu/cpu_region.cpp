// cpu_region.cpp — growable host memory for session KV rows (backend.h Region): address space is
// reserved once with mmap(PROT_NONE) for the session's context limit, and blocks of
// modelspec::kCpuKvBlockBytes are made readable/writable (mprotect) as rows are added and given back
// to the OS (madvise(MADV_DONTNEED) + PROT_NONE) when a rewind or reset drops them.
// Only committed bytes are counted; a reservation costs address space, not memory.
// Deliberately not here: which rows a session needs (model/kv_state.cpp), block sizes (memory_plan).
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_impl.h"
#include "modelspec/memory_plan.h"

namespace ds4::backend::cpu {

uint64_t CpuBackend::region_block_bytes() const { return modelspec::kCpuKvBlockBytes; }

Result<Region> CpuBackend::reserve_region(uint64_t max_bytes, MemCategory cat) {
  Region::Parts p;
  p.reserved = modelspec::round_up(max_bytes, region_block_bytes());
  if (p.reserved) {
    // MAP_NORESERVE: the reservation is not charged against overcommit; only touched pages use memory.
    void* base = mmap(nullptr, p.reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
      return out_of_memory("cpu backend: cannot reserve " + std::to_string(p.reserved) + " bytes of address space for " +
                           mem_category_name(cat) + ": " + std::strerror(errno));
    p.base = base;
  }
  return Region(this, cat, std::move(p));
}

Status CpuBackend::resize_region(Region& r, uint64_t bytes) {
  Region::Parts& p = r.parts();
  const uint64_t want = modelspec::round_up(bytes, region_block_bytes());
  if (want > p.reserved)
    return invalid_argument("cpu backend: " + std::to_string(bytes) + " bytes of " + mem_category_name(r.category()) +
                        " exceed the " + std::to_string(p.reserved) + " bytes reserved for the context limit");
  char* base = static_cast<char*>(p.base);
  if (want > p.committed) {
    if (mprotect(base + p.committed, want - p.committed, PROT_READ | PROT_WRITE) != 0)
      return out_of_memory("cpu backend: cannot commit " + std::to_string(want - p.committed) + " bytes for " +
                           mem_category_name(r.category()) + ": " + std::strerror(errno));
    counted_[r.category()] += want - p.committed;
  } else if (want < p.committed) {
    // DONTNEED frees the pages now (they read as zero if committed again); PROT_NONE makes a stray
    // access beyond the committed rows fault instead of silently growing the resident set.
    madvise(base + want, p.committed - want, MADV_DONTNEED);
    mprotect(base + want, p.committed - want, PROT_NONE);
    counted_[r.category()] -= p.committed - want;
  }
  p.committed = want;
  return Status::Ok();
}

void CpuBackend::release_region(Region& r) {
  Region::Parts& p = r.parts();
  if (p.base) munmap(p.base, p.reserved);
  counted_[r.category()] -= p.committed;
  p = Region::Parts{};
}

}  // namespace ds4::backend::cpu
