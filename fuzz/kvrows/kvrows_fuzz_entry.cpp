// kvrows_fuzz_entry.cpp — see kvrows_fuzz_entry.h. Input: byte 0 picks the row width (1..256),
// the rest is used twice:
//   1. as packed rows (what a restored compact snapshot hands unpack_rows, untrusted): decoding
//      never crashes or reads outside the input; an accepted input re-packs to bytes that decode
//      to bit-identical floats (the decoder and encoder agree on every form);
//   2. as raw float32 values (whatever bit patterns: NaN payloads, subnormals, -0): packing then
//      unpacking gives back exactly the input bits (the encoder never stores lossy forms).
#include "kvrows_fuzz_entry.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/row_pack.h"

namespace ds4::fuzz {
namespace {
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_kvrows: property violated: %s\n", what);
    std::abort();
  }
}
}  // namespace

int kvrows_fuzz_one(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t width = 1 + data[0];
  std::span<const uint8_t> body(data + 1, size - 1);

  // 1. Untrusted packed bytes: try 1..4 rows (a valid input for n rows fails for the others).
  for (int64_t rows = 1; rows <= 4; ++rows) {
    std::vector<float> out(static_cast<size_t>(rows * width));
    if (!runtime::unpack_rows(body, width, out).ok()) continue;
    std::vector<uint8_t> again;
    runtime::pack_rows(out, width, again);
    std::vector<float> back(out.size());
    check(runtime::unpack_rows(again, width, back).ok(), "re-packed rows decode");
    check(std::memcmp(back.data(), out.data(), out.size() * 4) == 0, "re-packed rows are bit-identical");
  }

  // 2. Arbitrary float bits round-trip exactly.
  const size_t n = body.size() / 4 / static_cast<size_t>(width) * static_cast<size_t>(width);
  if (n == 0) return 0;
  std::vector<float> values(n);
  std::memcpy(values.data(), body.data(), n * 4);
  std::vector<uint8_t> packed;
  runtime::pack_rows(values, width, packed);
  check(packed.size() <= n * 4 + (n / static_cast<size_t>(width)) * static_cast<size_t>((width + 63) / 64),
        "packed size at most f32 plus one tag per group");
  std::vector<float> back(n);
  check(runtime::unpack_rows(packed, width, back).ok(), "packed values decode");
  check(std::memcmp(back.data(), values.data(), n * 4) == 0, "packed values are bit-identical");
  return 0;
}

}  // namespace ds4::fuzz
