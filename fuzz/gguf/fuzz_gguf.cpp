// fuzz_gguf.cpp — libFuzzer entry for the GGUF reader (and, through a round trip, the writer).
//
// Properties checked on every input: parsing never crashes, hangs or over-allocates (ASan/UBSan
// and libFuzzer's -rss_limit_mb catch those); every accessor of an accepted file stays inside the
// image (ASan sees reads past the fuzzer's buffer); and an accepted file, re-written by the Writer
// and parsed again, yields the same metadata, directory and tensor bytes. A violated property
// calls abort(). tests/gguf also runs this entry with gcc over seeds + random mutations.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gguf/gguf.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_gguf: property violated: %s\n", what);
    std::abort();
  }
}

// Reads every accepted structure; the results feed a checksum so nothing is optimized away.
uint64_t exercise(const ds4::gguf::File& f) {
  uint64_t sum = f.version() + f.alignment() + f.data_offset();
  for (const auto& kv : f.metadata()) {
    const ds4::gguf::Value* first = f.find(kv.key);
    check(first != nullptr, "find() misses a key present in metadata()");
    sum += kv.value.to_display(4).size();
    sum += f.get_u64(kv.key).ok() + f.get_i64(kv.key).ok() + f.get_f64(kv.key).ok();
    sum += f.get_bool(kv.key).ok() + f.get_string(kv.key).ok() + f.get_array(kv.key).ok();
  }
  for (const auto& t : f.tensors()) {
    check(f.find_tensor(t.name) == &t, "find_tensor() does not return the directory entry");
    auto bytes = f.tensor(t).bytes();
    check(bytes.size() == t.n_bytes, "tensor span size differs from n_bytes");
    check(f.data_offset() + t.offset + t.n_bytes <= f.file_size(), "tensor leaves the file");
    for (uint8_t b : bytes) sum += b;
  }
  return sum;
}

// Re-encodes an accepted file and checks the reader sees the same thing again.
void round_trip(const ds4::gguf::File& f) {
  // A hostile alignment (up to 2^32-1) would make the rewritten image gigabytes of padding.
  if (f.alignment() > 4096 || f.alignment() % 8 != 0) return;
  ds4::gguf::Writer w;
  for (const auto& kv : f.metadata()) w.add(kv.key, kv.value);
  for (const auto& t : f.tensors()) w.add_tensor({t.name, t.ne, t.type});
  const auto& tensors = f.tensors();
  auto image = w.write_to_memory(
      [&](size_t i, std::span<uint8_t> out) {
        auto src = f.tensor(tensors[i]).bytes();
        check(src.size() == out.size(), "writer buffer size differs from the reader's n_bytes");
        if (!out.empty()) std::memcpy(out.data(), src.data(), out.size());
        return ds4::Status::Ok();
      },
      {.alignment = f.alignment(), .n_threads = 1});
  // The writer may refuse what the reader tolerates (e.g. a general.alignment of the wrong type
  // next to a non-default alignment cannot happen; duplicate keys are allowed) — but only with a Status.
  if (!image.ok()) return;
  auto g = ds4::gguf::File::from_memory(*image);
  check(g.ok(), "the writer produced a file the reader rejects");
  const auto& a = f.metadata();
  const auto& b = (*g)->metadata();
  check(a.size() == b.size(), "metadata count changed in the round trip");
  for (size_t i = 0; i < a.size(); ++i) {
    check(a[i].key == b[i].key, "metadata key changed in the round trip");
    check(a[i].value == b[i].value, "metadata value changed in the round trip");
  }
  const auto& ta = f.tensors();
  const auto& tb = (*g)->tensors();
  check(ta.size() == tb.size(), "tensor count changed in the round trip");
  for (size_t i = 0; i < ta.size(); ++i) {
    check(ta[i].name == tb[i].name && ta[i].ne == tb[i].ne && ta[i].type_id == tb[i].type_id &&
              ta[i].n_bytes == tb[i].n_bytes,
          "tensor info changed in the round trip");
    auto x = f.tensor(ta[i]).bytes();
    auto y = (*g)->tensor(tb[i]).bytes();
    check(x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0),
          "tensor bytes changed in the round trip");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ds4::gguf::OpenOptions opts;
  opts.max_metadata_bytes = uint64_t{64} << 20;  // keeps the fuzzer far below its RSS limit
  auto f = ds4::gguf::File::from_memory(std::span<const uint8_t>(data, size), opts);
  if (!f.ok()) {
    check(!f.status().message().empty(), "an error without a message");
    return 0;
  }
  volatile uint64_t sink = exercise(**f);
  (void)sink;
  round_trip(**f);
  return 0;
}
