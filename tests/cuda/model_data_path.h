// model_data_path.h — where the CUDA model tests find a model file: DS4_CUDA_TEST_DATA (a folder holding
// the generated tiny models, on the GPU machine: scripts/gpu_check.sh) or the path this build compiled in.
// Deliberately not here: generating or checking the files (each test skips when its file is missing).
#pragma once

#include <cstdlib>
#include <string>

namespace ds4::test {

inline std::string model_data_path(const char* file, const char* compiled_default) {
  if (const char* d = std::getenv("DS4_CUDA_TEST_DATA")) return std::string(d) + "/" + file;
  return compiled_default;
}

}  // namespace ds4::test
