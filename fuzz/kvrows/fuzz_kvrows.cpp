// fuzz_kvrows.cpp — libFuzzer target for compact KV rows (the decoder behind compact session
// snapshots restored from the disk KV cache). Properties: kvrows_fuzz_entry.cpp.
#include "kvrows_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return ds4::fuzz::kvrows_fuzz_one(data, size); }
