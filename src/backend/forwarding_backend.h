// forwarding_backend.h — a Backend that passes every call on to another backend, for wrappers that
// change a few calls and keep the rest: bench/numerics's ULP-noise backend, tests/model/test_branches.cpp's
// late side lane. Buffers and regions stay the inner backend's (it allocates, counts and frees them), so
// a wrapper owns no memory of its own.
// Deliberately not here: any change of behaviour (that is each wrapper's), fused ops split into pieces
// (by_pieces.h, for a wrapper that needs them).
#pragma once

#include <span>

#include "backend/backend.h"

namespace ds4::backend {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : in_(inner) {}

  const char* name() const override { return in_.name(); }
  bool host_memory() const override { return in_.host_memory(); }
  Result<Buffer> alloc(uint64_t bytes, MemCategory cat) override { return in_.alloc(bytes, cat); }
  void release(void* ptr, uint64_t bytes, MemCategory cat) override { in_.release(ptr, bytes, cat); }
  Result<const void*> map_weight(const void* host, uint64_t bytes) override { return in_.map_weight(host, bytes); }
  MemBytes allocated() const override { return in_.allocated(); }
  uint64_t region_block_bytes() const override { return in_.region_block_bytes(); }
  Result<Region> reserve_region(uint64_t max_bytes, MemCategory cat) override {
    return in_.reserve_region(max_bytes, cat);
  }
  Status resize_region(Region& r, uint64_t bytes) override { return in_.resize_region(r, bytes); }
  void release_region(Region& r) override { in_.release_region(r); }
  void upload(void* dst, const void* src, uint64_t bytes) override { in_.upload(dst, src, bytes); }
  void download(void* dst, const void* src, uint64_t bytes) override { in_.download(dst, src, bytes); }
  void copy(void* dst, const void* src, uint64_t bytes) override { in_.copy(dst, src, bytes); }
  void fill_f32(float* dst, float value, int64_t count) override { in_.fill_f32(dst, value, count); }
  Status sync() override { return in_.sync(); }
  void time_mark(int slot) override { in_.time_mark(slot); }
  double time_ms(int from, int to) override { return in_.time_ms(from, to); }
  void read_back_start(int slot, const void* src, uint64_t bytes) override { in_.read_back_start(slot, src, bytes); }
  Status read_back_wait(int slot, void* dst, uint64_t bytes) override { return in_.read_back_wait(slot, dst, bytes); }
  GraphMode graph_begin(std::span<const int64_t> key) override { return in_.graph_begin(key); }
  bool graph_end() override { return in_.graph_end(); }
  void graph_cancel() override { in_.graph_cancel(); }
  int64_t graph_owner() override { return in_.graph_owner(); }  // one id space: the cache is the inner one's
  void graph_release(int64_t owner) override { in_.graph_release(owner); }
  void fork() override { in_.fork(); }
  void resume_main() override { in_.resume_main(); }
  void join() override { in_.join(); }

  void matmul(const MatmulArgs& a) override { in_.matmul(a); }
  void matmul_many(std::span<const MatmulArgs> jobs) override { in_.matmul_many(jobs); }
  void rms_norm(const RmsNormArgs& a) override { in_.rms_norm(a); }
  void rope(const RopeArgs& a) override { in_.rope(a); }
  void embed(const EmbedArgs& a) override { in_.embed(a); }
  void hc_split(const HcSplitArgs& a) override { in_.hc_split(a); }
  void hc_head(const HcHeadArgs& a) override { in_.hc_head(a); }
  void hc_collapse(const HcCollapseArgs& a) override { in_.hc_collapse(a); }
  void hc_post(const HcPostArgs& a) override { in_.hc_post(a); }
  void hc_pre(const HcPreArgs& a) override { in_.hc_pre(a); }
  void norm_rope(const NormRopeArgs& a) override { in_.norm_rope(a); }
  void fp8_round(const Fp8RoundArgs& a) override { in_.fp8_round(a); }
  void indexer_qat(const IndexerQatArgs& a) override { in_.indexer_qat(a); }
  void f16_round(float* x, int64_t count) override { in_.f16_round(x, count); }
  void add(float* y, const float* x, int64_t count) override { in_.add(y, x, count); }
  void scale(float* y, float s, int64_t count) override { in_.scale(y, s, count); }
  void compressor(const CompressorArgs& a) override { in_.compressor(a); }
  void attention(const AttentionArgs& a) override { in_.attention(a); }
  void indexer(const IndexerArgs& a) override { in_.indexer(a); }
  void router(const RouterArgs& a) override { in_.router(a); }
  void moe(const MoeArgs& a) override { in_.moe(a); }
  void swiglu(const SwigluArgs& a) override { in_.swiglu(a); }
  void argmax(const ArgmaxArgs& a) override { in_.argmax(a); }

 protected:
  Backend& in_;
};

}  // namespace ds4::backend
