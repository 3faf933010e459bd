// seeds.h — small valid KV cache entry images for the fuzzer corpus and the gcc mutation test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4::kvstore::fuzz {

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};
std::vector<Seed> seed_images();

}  // namespace ds4::kvstore::fuzz
