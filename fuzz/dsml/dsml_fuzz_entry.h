// dsml_fuzz_entry.h — the fuzz property check shared by the libFuzzer target (fuzz_dsml, clang)
// and the gcc ctest that runs seeds + random mutations (tests/chat/test_dsml_mutations.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ds4::chat::fuzz {

// Input layout: byte 0 selects what runs (bits 0-1: 0/1 DSML parser, 2 chat/completions +
// render, 3 Anthropic/Responses + render; bit 2 flavor ds4/official; bit 3 thinking; bit 4
// tools enabled), byte 1 seeds the split points, the rest is the text. A violated property
// prints what failed and calls abort().
void run_one(const uint8_t* data, size_t size);

// Seed inputs (already carrying the two header bytes).
std::vector<std::string> seeds();

}  // namespace ds4::chat::fuzz
