// cuda_test_util.h — shared helpers of the CUDA tests: a CPU/CUDA backend pair, device copies of
// host vectors, NaN-poisoned outputs, random weights in every ggml type, and tolerance checks that
// print one "PARITY" line per case (scripts/gpu_check.sh collects them into docs/PERF.md's table).
// Random data comes in chunks of fixed size, each from its own stream seeded by (one draw of the test's
// generator, chunk index), filled on every core: Flash-size weights (36 MB a Q8_0 matrix) took a third of a
// second each from one per-byte stream, most of test_cuda_ops' time; the bytes do not depend on the thread count.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/half.h"
#include "quant/types.h"

namespace ds4::test {

// body(c) for every c in [0, chunks), on up to hardware_concurrency() threads (in order on one when
// chunks ≤ 1). Each chunk must write only its own outputs.
inline void for_chunks(int64_t chunks, const std::function<void(int64_t)>& body) {
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int64_t c = next++; c < chunks; c = next++) body(c);
    });
  for (auto& t : pool) t.join();
}

// The stream of chunk `c` of a fill seeded by `seed`.
inline std::mt19937_64 chunk_rng(uint32_t seed, int64_t c) {
  std::seed_seq ss{seed, static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32)};
  return std::mt19937_64(ss);
}

// got ≡ want bit for bit (memcmp per float): one failure with the count and the first index, and one
// "PARITY" line saying `relation` held or not (fused ops vs their pieces, new kernels vs the previous ones).
inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                             const char* relation = "fused == pieces") {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && ++bad == 1) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " values differ (" << relation << "), first at " << first << " ("
                     << (first < got.size() ? got[first] : 0) << " vs " << (first < got.size() ? want[first] : 0) << ")";
  std::printf("PARITY %-52s n=%-9zu %s bit for bit: %s\n", what.c_str(), got.size(), relation, bad ? "FAIL" : "ok");
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = backend::cuda::make_cuda_backend();
    if (!g.ok()) GTEST_SKIP() << "no CUDA device: " << g.status().to_string();
    gpu_ = std::move(g).value();
    cpu_ = backend::cpu::make_cpu_backend({0});
    rng_.seed(static_cast<uint32_t>(::testing::UnitTest::GetInstance()->random_seed()) * 7919u + 17u);
  }

  // Buffers made here are done when the helper returns: alloc's zero fill, a small upload (through the
  // pinned ring) and the NaN fill run on gpu_'s stream, and many tests hand the buffers to another backend
  // (its own stream) — under load (8 test processes on one GPU, W2) such a kernel ran before gpu_'s fill or
  // copy: NaN counts in CudaCsa, an illegal address in CudaAttention. The errors stay in gpu_ (sticky) for
  // the test's own sync.
  void settle() { (void)gpu_->sync(); }
  // Device copy of `h`, alive until the test ends.
  template <typename T>
  T* dev(const std::vector<T>& h) {
    auto b = gpu_->alloc(h.size() * sizeof(T) + 16, MemCategory::scratch);
    EXPECT_TRUE(b.ok());
    gpu_->upload(b->data(), h.data(), h.size() * sizeof(T));
    T* p = static_cast<T*>(b->data());
    bufs_.push_back(std::move(b).value());
    settle();
    return p;
  }
  // Device array of n floats filled with NaN (an op that skips an output shows up as NaN).
  float* poisoned(size_t n) {
    auto b = gpu_->alloc(n * sizeof(float) + 16, MemCategory::scratch);
    EXPECT_TRUE(b.ok());
    gpu_->fill_f32(b->f32(), NAN, static_cast<int64_t>(n));
    float* p = b->f32();
    bufs_.push_back(std::move(b).value());
    settle();
    return p;
  }
  int32_t* poisoned_i32(size_t n) { return reinterpret_cast<int32_t*>(poisoned(n)); }
  template <typename T>
  std::vector<T> host(const T* d, size_t n) {
    std::vector<T> h(n);
    gpu_->download(h.data(), d, n * sizeof(T));
    return h;
  }
  // GPU copy of a CPU weight, alive until the test ends. A plain upload, not map_weight: the engine's path
  // stages through pinned slots it frees at every sync(), which cost a test ~0.15 s per matrix on the H200
  // (test_cuda_ops took 339 s); map_weight itself is tested in test_cuda_ops.cpp and by every model test.
  backend::Weight gpu_weight(const backend::Weight& w, uint64_t total_bytes) {
    auto b = gpu_->alloc(total_bytes, MemCategory::scratch);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return w;
    gpu_->upload(b->data(), w.data, total_bytes);
    backend::Weight g = w;
    g.data = b->data();
    bufs_.push_back(std::move(b).value());
    settle();
    return g;
  }

  // A random `type` matrix on the device with n random activation rows (host and device copies), for
  // tests that multiply it by slices of the vectors (matmul_slice).
  struct DeviceMatmul {
    backend::Weight w, gw;       // host view (into `bytes`) and device copy
    std::vector<uint8_t> bytes;
    std::vector<float> x;        // [n][cols]
    float* gx = nullptr;
  };
  DeviceMatmul device_matmul(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
    DeviceMatmul m;
    m.bytes = random_weight(type, rows, cols, &m.w);
    m.w.data = m.bytes.data();
    m.gw = gpu_weight(m.w, m.w.row_bytes * rows);
    m.x = randn(static_cast<size_t>(n * cols));
    m.gx = dev(m.x);
    return m;
  }
  // W·x for vectors first … first + count − 1 on gpu_ (ds4 numerics), copied back: [count][rows].
  std::vector<float> matmul_slice(const DeviceMatmul& m, int64_t first, int64_t count) {
    float* y = poisoned(static_cast<size_t>(count * m.w.rows));
    gpu_->matmul({m.gw, m.gx + first * m.w.cols, m.w.cols, y, m.w.rows, count, backend::MatmulNumerics::ds4});
    return host(y, static_cast<size_t>(count * m.w.rows));
  }

  // n values of N(0, scale²): 64K-value chunks, each from its own stream (see the header comment).
  std::vector<float> randn(size_t n, float scale = 1.0f) {
    constexpr int64_t kChunk = int64_t{1} << 16;
    std::vector<float> v(n);
    const uint32_t seed = rng_();
    for_chunks((static_cast<int64_t>(n) + kChunk - 1) / kChunk, [&](int64_t c) {
      std::mt19937_64 g = chunk_rng(seed, c);
      std::normal_distribution<float> d(0.0f, scale);
      const size_t end = std::min(n, static_cast<size_t>((c + 1) * kChunk));
      for (size_t i = static_cast<size_t>(c * kChunk); i < end; ++i) v[i] = d(g);
    });
    return v;
  }
  int32_t randint(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }

  // Random rows of `type` (quantized types: random quants with sane random f16 scales, so every bit
  // pattern of the quants is exercised without a slow encoder). Returns the bytes; fills `w`. Quantized:
  // chunks of 4,096 blocks, each 8 random bytes per draw of its own stream, then its blocks' scales.
  std::vector<uint8_t> random_weight(GgmlType type, int64_t rows, int64_t cols, backend::Weight* w, float scale = 0.05f) {
    const uint64_t row_bytes = *type_bytes(type, static_cast<uint64_t>(cols));
    std::vector<uint8_t> b(row_bytes * rows + 64);
    if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
      auto f = randn(static_cast<size_t>(rows * cols), scale);
      for_chunks((rows * cols + (1 << 20) - 1) >> 20, [&](int64_t c) {
        const size_t end = std::min(f.size(), static_cast<size_t>((c + 1) << 20));
        for (size_t i = static_cast<size_t>(c << 20); i < end; ++i) {
          if (type == GgmlType::F32) std::memcpy(&b[4 * i], &f[i], 4);
          uint16_t h = type == GgmlType::F16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
          if (type != GgmlType::F32) std::memcpy(&b[2 * i], &h, 2);
        }
      });
    } else {
      const auto tr = *type_traits(static_cast<uint32_t>(type));
      const uint64_t bb = tr.block_bytes, nblocks = row_bytes * rows / bb;
      constexpr uint64_t kChunkBlocks = 4096;
      const uint32_t seed = rng_();
      for_chunks(static_cast<int64_t>((nblocks + kChunkBlocks - 1) / kChunkBlocks), [&](int64_t c) {
        std::mt19937_64 g = chunk_rng(seed, c);
        std::uniform_real_distribution<float> sd(0.2f * scale, scale);
        const uint64_t k0 = static_cast<uint64_t>(c) * kChunkBlocks, k1 = std::min(nblocks, k0 + kChunkBlocks);
        // The last chunk also fills the 64 bytes past the rows.
        const uint64_t end = k1 == nblocks ? b.size() : k1 * bb;
        uint64_t i = k0 * bb;
        for (; i + 8 <= end; i += 8) {
          const uint64_t r = g();
          std::memcpy(&b[i], &r, 8);
        }
        for (uint64_t r = g(); i < end; ++i, r >>= 8) b[i] = static_cast<uint8_t>(r);
        auto put = [&](uint64_t blk, int off, float v) {
          const uint16_t h = f32_to_f16(v);
          std::memcpy(&b[blk * bb + off], &h, 2);
        };
        for (uint64_t k = k0; k < k1; ++k) {
          switch (type) {
            case GgmlType::Q8_0: put(k, 0, sd(g) / 16); break;
            case GgmlType::Q2_K: put(k, 80, sd(g) / 4); put(k, 82, sd(g) / 8); break;
            case GgmlType::Q4_K: put(k, 0, sd(g) / 16); put(k, 2, sd(g) / 32); break;
            default: put(k, 0, sd(g)); break;  // IQ2_XXS
          }
        }
      });
    }
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = row_bytes;
    return b;
  }

  std::unique_ptr<backend::Backend> cpu_, gpu_;
  std::vector<backend::Buffer> bufs_;
  std::mt19937 rng_;
};

struct CloseStats {
  double max_abs = 0, max_ref = 0;
  int64_t bad = 0, nan = 0;
};

// |got − want| ≤ abs_tol + rel_tol·max|want| everywhere (NaN in got where want is finite is a failure).
inline CloseStats expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel_tol,
                               double abs_tol, const std::string& what) {
  CloseStats s;
  for (float w : want) s.max_ref = std::max(s.max_ref, std::isfinite(w) ? std::fabs(static_cast<double>(w)) : 0.0);
  const double tol = abs_tol + rel_tol * s.max_ref;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (std::isnan(got[i]) != std::isnan(want[i])) {
      ++s.nan;
      continue;
    }
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (want[i] != got[i]) ++s.bad;
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    s.max_abs = std::max(s.max_abs, d);
    if (d > tol) ++s.bad;
  }
  EXPECT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(s.nan, 0) << what << ": NaN mismatches";
  EXPECT_EQ(s.bad, 0) << what << ": " << s.bad << " values off by more than " << tol << " (max |Δ| " << s.max_abs
                      << ", max |ref| " << s.max_ref << ")";
  std::printf("PARITY %-44s n=%-9zu max|d|=%.3g  max|d|/max|ref|=%.3g  tol=%.3g  %s\n", what.c_str(), want.size(),
              s.max_abs, s.max_abs / std::max(1e-30, s.max_ref), tol, (s.bad || s.nan) ? "FAIL" : "ok");
  return s;
}

}  // namespace ds4::test
