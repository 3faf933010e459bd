// kvrows_fuzz_entry.h — the fuzz entry for compact KV rows (runtime/row_pack), shared by the
// libFuzzer target (fuzz_kvrows.cpp) and the gcc ctest that drives it with random inputs
// (tests/kvstore/engine/test_compact_snapshot.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4::fuzz {
// Returns 0; calls abort() when a property is violated.
int kvrows_fuzz_one(const uint8_t* data, size_t size);
}  // namespace ds4::fuzz
