// fuzz_dsml.cpp — libFuzzer entry for the DSML output parser and the chat request mappers and
// renderers; the properties are in dsml_fuzz_entry.cpp (shared with the gcc mutation ctest).
#include <cstddef>
#include <cstdint>

#include "dsml_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ds4::chat::fuzz::run_one(data, size);
  return 0;
}
