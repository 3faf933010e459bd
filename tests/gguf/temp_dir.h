// temp_dir.h — the gguf tests' file helpers: the shared scratch folder (tests/common/temp_dir.h) and
// whole-file read/write of raw bytes.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../common/temp_dir.h"

namespace ds4::gguf::testing {

using TempDir = ds4::test_util::TempDir;  // tests/common/temp_dir.h

inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace ds4::gguf::testing
