// seeds.h — small, valid GGUF images that seed the fuzzer and the gcc-run fuzz ctest.
//
// Built with gguf::Writer so they track the writer's format exactly; together they reach every
// metadata value type, nested arrays, several tensor types, alignment 32 and 64, an empty file
// and a zero-element tensor. Deliberately small (each well under 4 KiB) so mutations stay fast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4::gguf::fuzz {

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};

std::vector<Seed> seed_images();

}  // namespace ds4::gguf::fuzz
