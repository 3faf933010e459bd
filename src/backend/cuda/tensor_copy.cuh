// tensor_copy.cuh — Hopper (sm_90) 2-D tensor copies: a tensor map (host-encoded through the driver's
// cuTensorMapEncodeTiled, reached by the runtime's entry-point query so that the build links no libcuda)
// and the one-instruction copy of a box into shared memory completing on an mbarrier (bulk_copy.cuh). The
// TMA unit takes one request per box instead of one per row. Used by gemm_q8.cu (gemm_q8 13 … 16) and
// matmul_f16_mma_ring.cu (f16_mma_decode_kernel's tensor forms). Below sm_90 the copy traps: callers launch
// these paths only when CudaBackend::sm90() holds.
#pragma once

#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's types (the function itself: tensor_map_encoder)

#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"  // smem_addr

namespace ds4::backend::cuda {

// Thread-level: the box at element (x, y) of `map` into `dst`, its bytes counted on `bar`.
__device__ inline void tensor_copy_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
#else
  __trap();
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, or null (the query's error cleared) where the driver has none.
inline EncodeTiled tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<EncodeTiled>(fn);
}

// A 2-D map over `rows` rows of `width` elements of `type` (rows `stride` bytes apart from `base`, 16-byte
// aligned), box `box_x` elements × `box_rows` rows, zeros past the ends, L2 promotion of 256 B. false: refused.
inline bool tensor_map_2d(EncodeTiled encode, CUtensorMap* map, CUtensorMapDataType type, const void* base,
                          uint64_t width, int64_t rows, uint64_t stride, uint32_t box_x, uint32_t box_rows) {
  const cuuint64_t dim[2] = {width, static_cast<cuuint64_t>(rows)}, strides[1] = {stride};
  const cuuint32_t box[2] = {box_x, box_rows}, estride[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dim, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace ds4::backend::cuda
