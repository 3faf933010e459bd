// test_writer.cpp — the streaming writer: thread-count determinism, bounded payloads in flight,
// error propagation, atomic replace (temp file + rename), I/O errors, sparse all-zero output, hole tensors.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "gguf/gguf.h"
#include "temp_dir.h"

namespace ds4::gguf {
namespace {

using testing::read_all;
using testing::TempDir;
using testing::write_all;

// 40 tensors of uneven sizes (some empty, some much larger) so workers finish out of order.
Writer many_tensors() {
  Writer w;
  w.add_string("general.architecture", "deepseek4");
  w.add_array("tokenizer.ggml.tokens", ValueType::string, {Value::of_string("a"), Value::of_string("b")});
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    uint64_t rows = rng() % 9;  // 0..8 rows
    GgmlType t = (i % 3 == 0) ? GgmlType::Q8_0 : (i % 3 == 1) ? GgmlType::F32 : GgmlType::Q4_K;
    uint64_t ne0 = t == GgmlType::Q4_K ? 256 : t == GgmlType::Q8_0 ? 64 : 1 + rng() % 50;
    if (i == 17) rows = 400;  // one large tensor
    w.add_tensor({"blk." + std::to_string(i) + ".w", {ne0, rows}, t});
  }
  return w;
}

// Payload depends only on (index, position); sleeps a pseudo-random while to shuffle finish order.
Status slow_fill(size_t i, std::span<uint8_t> out) {
  std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 3000));
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return Status::Ok();
}

TEST(GgufWriter, SameBytesWithOneAndFourThreads) {
  TempDir dir;
  Writer w = many_tensors();
  ASSERT_TRUE(w.write(dir.file("t1.gguf"), slow_fill, {.alignment = 32, .n_threads = 1}).ok());
  ASSERT_TRUE(w.write(dir.file("t4.gguf"), slow_fill, {.alignment = 32, .n_threads = 4}).ok());
  ASSERT_TRUE(w.write(dir.file("t64.gguf"), slow_fill, {.alignment = 32, .n_threads = 64}).ok());
  auto b1 = read_all(dir.file("t1.gguf"));
  EXPECT_GT(b1.size(), 50000u);
  EXPECT_EQ(b1, read_all(dir.file("t4.gguf")));
  EXPECT_EQ(b1, read_all(dir.file("t64.gguf")));
  auto mem = w.write_to_memory(slow_fill, {.alignment = 32, .n_threads = 3});
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(b1, *mem);
  auto f = File::open(dir.file("t4.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors().size(), 40u);
}

TEST(GgufWriter, AtMostNThreadsPayloadsInFlightAndWrittenInOrder) {
  Writer w = many_tensors();
  constexpr int kThreads = 4;
  std::atomic<int> in_flight{0};
  std::atomic<int> max_in_flight{0};
  std::mutex mu;
  std::vector<bool> done(w.n_tensors(), false);
  bool window_violated = false;
  auto payload = [&](size_t i, std::span<uint8_t> out) -> Status {
    int now = ++in_flight;
    int prev = max_in_flight.load();
    while (now > prev && !max_in_flight.compare_exchange_weak(prev, now)) {
    }
    {
      // Tensor i's buffer is the one tensor i - n_threads used; that one must be finished.
      std::lock_guard<std::mutex> lock(mu);
      if (i >= kThreads && !done[i - kThreads]) window_violated = true;
    }
    Status st = slow_fill(i, out);
    {
      std::lock_guard<std::mutex> lock(mu);
      done[i] = true;
    }
    --in_flight;
    return st;
  };
  auto img = w.write_to_memory(payload, {.alignment = 32, .n_threads = kThreads});
  ASSERT_TRUE(img.ok());
  EXPECT_LE(max_in_flight.load(), kThreads);
  EXPECT_GE(max_in_flight.load(), 2);  // it really ran in parallel
  EXPECT_FALSE(window_violated);
  EXPECT_EQ(*img, *w.write_to_memory(slow_fill));
}

TEST(GgufWriter, PayloadErrorStopsTheWriteAndNamesTheTensor) {
  for (int threads : {1, 4}) {
    TempDir dir;
    Writer w = many_tensors();
    std::atomic<int> calls{0};
    auto payload = [&](size_t i, std::span<uint8_t> out) -> Status {
      ++calls;
      if (i == 9) return invalid_argument("quantizer refused the rows");
      return slow_fill(i, out);
    };
    Status st = w.write(dir.file("m.gguf"), payload, {.alignment = 32, .n_threads = threads});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::invalid_argument);
    EXPECT_NE(st.message().find("tensor 'blk.9.w' (index 9)"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("quantizer refused the rows"), std::string::npos);
    EXPECT_LT(calls.load(), 40);  // it stopped early
    EXPECT_TRUE(dir.names().empty()) << "left behind: " << dir.names().front();
  }
}

TEST(GgufWriter, PayloadExceptionsBecomeStatus) {
  Writer w = many_tensors();
  auto payload = [](size_t i, std::span<uint8_t> out) -> Status {
    if (i == 3) throw std::runtime_error("boom");
    return slow_fill(i, out);
  };
  for (int threads : {1, 3}) {
    auto r = w.write_to_memory(payload, {.alignment = 32, .n_threads = threads});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::internal);
    EXPECT_NE(r.status().message().find("boom"), std::string::npos);
  }
}

TEST(GgufWriter, BufferIsZeroedBeforeEachCall) {
  Writer w;
  w.add_tensor({"a", {64}, GgmlType::F32});
  w.add_tensor({"b", {64}, GgmlType::F32});
  // Writes only tensor a; b must come out as zeros, not as a's leftover bytes.
  auto payload = [](size_t i, std::span<uint8_t> out) -> Status {
    if (i == 0) std::fill(out.begin(), out.end(), 0xab);
    return Status::Ok();
  };
  auto img = w.write_to_memory(payload);
  ASSERT_TRUE(img.ok());
  auto f = File::from_memory(*img);
  ASSERT_TRUE(f.ok());
  for (uint8_t b : (*f)->tensor(*(*f)->find_tensor("b")).bytes()) ASSERT_EQ(b, 0);
}

TEST(GgufWriter, ReplacesAtomically) {
  TempDir dir;
  const std::string path = dir.file("model.gguf");
  write_all(path, {'o', 'l', 'd'});
  Writer w = many_tensors();
  auto failing = [](size_t i, std::span<uint8_t> out) -> Status {
    return i == 30 ? io_error("disk gone") : slow_fill(i, out);
  };
  ASSERT_FALSE(w.write(path, failing, {.n_threads = 2}).ok());
  EXPECT_EQ(read_all(path), (std::vector<uint8_t>{'o', 'l', 'd'}));  // old file untouched
  EXPECT_EQ(dir.names().size(), 1u);
  ASSERT_TRUE(w.write(path, slow_fill, {.n_threads = 2}).ok());
  EXPECT_TRUE(File::open(path).ok());
  EXPECT_EQ(dir.names().size(), 1u);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_NE(st.st_mode & S_IRUSR, 0u);
}

TEST(GgufWriter, IoErrorsAreClear) {
  Writer w = many_tensors();
  Status st = w.write("/nonexistent-dir-ds4/x/model.gguf", slow_fill);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::io_error);
  EXPECT_NE(st.message().find("No such file or directory"), std::string::npos) << st.message();
}

TEST(GgufWriter, FileSizeLimitGivesIoErrorAndNoLeftovers) {
  // RLIMIT_FSIZE makes write() fail with EFBIG, the same path as ENOSPC: the write stops, the
  // error names the OS reason and the byte position, and the temp file is removed.
  TempDir dir;
  Writer w = many_tensors();
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 16384;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  Status st = w.write(dir.file("m.gguf"), slow_fill, {.n_threads = 2});
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::io_error);
  EXPECT_NE(st.message().find("File too large"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("at byte"), std::string::npos) << st.message();
  EXPECT_TRUE(dir.names().empty());
}

TEST(GgufWriter, EmptyPayloadWritesSparseZeros) {
  TempDir dir;
  Writer w;
  w.add_string("general.name", "sparse");
  w.add_tensor({"big", {4096, 4096}, GgmlType::Q8_0});  // 17.8 MB of zeros
  w.add_tensor({"small", {5}, GgmlType::F32});
  const std::string path = dir.file("sparse.gguf");
  ASSERT_TRUE(w.write(path, nullptr).ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const TensorInfo* big = (*f)->find_tensor("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->n_bytes, 4096u * 128u * 34u);
  auto bytes = (*f)->tensor(*big).bytes();
  size_t nonzero = 0;
  for (size_t i = 0; i < bytes.size(); i += 4093) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), (*f)->data_offset() + 4096u * 128u * 34u + 32u);
  // Holes: far fewer blocks allocated than the size (every common Linux filesystem supports them).
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, static_cast<uint64_t>(st.st_size) / 4);
  auto mem = w.write_to_memory(nullptr);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(read_all(path), *mem);
}

// WriteOptions::hole: the named tensors become zeros without a payload call (holes in a file), the
// others keep their payload, and every thread count gives the same bytes as an all-payload write with
// those tensors zeroed.
TEST(GgufWriter, HoleTensorsAreZeroAndSkipThePayload) {
  Writer w = many_tensors();
  auto hole = [](size_t i) { return i % 4 != 1; };  // tensor 17 (the large one) included
  std::mutex mu;
  std::vector<size_t> called;
  PayloadFn fill = [&](size_t i, std::span<uint8_t> out) {
    {
      std::lock_guard<std::mutex> lock(mu);
      called.push_back(i);
    }
    return slow_fill(i, out);
  };
  PayloadFn zeroed = [&](size_t i, std::span<uint8_t> out) { return hole(i) ? Status::Ok() : slow_fill(i, out); };
  auto expect = w.write_to_memory(zeroed, {.alignment = 32, .n_threads = 1});
  ASSERT_TRUE(expect.ok());
  for (int threads : {1, 3}) {
    called.clear();
    auto img = w.write_to_memory(fill, {.alignment = 32, .n_threads = threads, .hole = hole});
    ASSERT_TRUE(img.ok()) << img.status().to_string();
    EXPECT_EQ(*img, *expect) << threads << " threads";
    for (size_t i : called) EXPECT_FALSE(hole(i)) << "payload called for hole tensor " << i;
    EXPECT_EQ(called.size(), 10u);
  }
  TempDir dir;
  const std::string path = dir.file("holes.gguf");
  ASSERT_TRUE(w.write(path, fill, {.alignment = 32, .n_threads = 2, .hole = hole}).ok());
  EXPECT_EQ(read_all(path), *expect);
}

TEST(GgufWriter, NoTensorsStillPadsToTheAlignment) {
  Writer w;
  w.add_u32("x", 1);
  auto img = w.write_to_memory(nullptr, {.alignment = 64});
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->size() % 64, 0u);
  auto f = File::from_memory(*img);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->data_offset(), img->size());
}

}  // namespace
}  // namespace ds4::gguf
