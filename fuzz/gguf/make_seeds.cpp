// make_seeds.cpp — writes the seed corpus of seeds.h into a folder: gguf_make_seeds DIR.
#include <cstdio>
#include <string>

#include "seeds.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  for (const auto& s : ds4::gguf::fuzz::seed_images()) {
    std::string path = std::string(argv[1]) + "/" + s.name + ".gguf";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(s.bytes.data(), 1, s.bytes.size(), f) != s.bytes.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "gguf_make_seeds: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
