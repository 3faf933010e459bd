// make_seeds.cpp — writes the seed entries into a corpus directory: kvstore_make_seeds DIR.
#include <cstdio>
#include <string>

#include "seeds.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kvstore_make_seeds DIR\n");
    return 2;
  }
  for (const auto& s : ds4::kvstore::fuzz::seed_images()) {
    const std::string path = std::string(argv[1]) + "/" + s.name + ".kv";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(s.bytes.data(), 1, s.bytes.size(), f) != s.bytes.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "kvstore_make_seeds: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
