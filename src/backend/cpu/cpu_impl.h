// cpu_impl.h — the CpuBackend class shared by the cpu/*.cpp op files (not a public header).
//
// Each op family lives in its own file (ops_*.cpp) as member functions of this class.
// Scratch vectors are owned here and only grow (before a parallel region, never inside one).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_pool.h"

namespace ds4::backend::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads);

  const char* name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  Result<Buffer> alloc(uint64_t bytes, MemCategory cat) override;
  void release(void* ptr, uint64_t bytes, MemCategory cat) override;
  Result<const void*> map_weight(const void* host, uint64_t bytes) override;
  MemBytes allocated() const override;
  uint64_t region_block_bytes() const override;                         // cpu_region.cpp
  Result<Region> reserve_region(uint64_t max_bytes, MemCategory cat) override;
  Status resize_region(Region& r, uint64_t bytes) override;
  void release_region(Region& r) override;
  void upload(void* dst, const void* src, uint64_t bytes) override;
  void download(void* dst, const void* src, uint64_t bytes) override;
  void copy(void* dst, const void* src, uint64_t bytes) override;
  void fill_f32(float* dst, float value, int64_t count) override;
  Status sync() override { return Status::Ok(); }

  void matmul(const MatmulArgs& a) override;            // ops_matmul.cpp
  void rms_norm(const RmsNormArgs& a) override;         // ops_elementwise.cpp
  void rope(const RopeArgs& a) override;                // ops_elementwise.cpp
  void embed(const EmbedArgs& a) override;              // ops_hc.cpp
  void hc_split(const HcSplitArgs& a) override;         // ops_hc.cpp
  void hc_head(const HcHeadArgs& a) override;           // ops_hc.cpp
  void hc_collapse(const HcCollapseArgs& a) override;   // ops_hc.cpp
  void hc_post(const HcPostArgs& a) override;           // ops_hc.cpp
  void hc_pre(const HcPreArgs& a) override;             // ops_hc.cpp (by_pieces.h)
  void norm_rope(const NormRopeArgs& a) override;       // ops_elementwise.cpp (by_pieces.h)
  void fp8_round(const Fp8RoundArgs& a) override;       // ops_elementwise.cpp
  void indexer_qat(const IndexerQatArgs& a) override;   // ops_elementwise.cpp
  void f16_round(float* x, int64_t count) override;     // ops_elementwise.cpp
  void add(float* y, const float* x, int64_t count) override;
  void scale(float* y, float s, int64_t count) override;
  void compressor(const CompressorArgs& a) override;    // ops_compressor.cpp
  void attention(const AttentionArgs& a) override;      // ops_attention.cpp
  void indexer(const IndexerArgs& a) override;          // ops_indexer.cpp
  void router(const RouterArgs& a) override;            // ops_moe.cpp
  void moe(const MoeArgs& a) override;                  // ops_moe.cpp
  void swiglu(const SwigluArgs& a) override;            // ops_moe.cpp
  void argmax(const ArgmaxArgs& a) override;            // ops_elementwise.cpp

  ThreadPool& pool() { return pool_; }

 private:
  // Per-thread float scratch of at least `n` values each (grown before parallel regions).
  std::vector<std::vector<float>>& thread_scratch(size_t n);
  std::vector<float>& grow(std::vector<float>& v, size_t n);
  std::vector<uint8_t>& grow(std::vector<uint8_t>& v, size_t n);
  std::vector<int32_t>& grow(std::vector<int32_t>& v, size_t n);

  ThreadPool pool_;
  MemBytes counted_;                          // live alloc() bytes by category
  uint64_t scratch_bytes_ = 0;                // capacity of the scratch vectors below
  std::vector<std::vector<float>> per_thread_;  // [threads][*] attention/indexer score rows
  std::vector<uint8_t> act_quant_;            // [n][blocks] quantized activation rows (matmul)
  std::vector<float> moe_x_, moe_g_, moe_u_, moe_y_;  // [tokens·k][dim|ff] gathered expert batches
  std::vector<int32_t> moe_rows_;             // [tokens·k] (token·k + slot) grouped by expert
};

}  // namespace ds4::backend::cpu
