// make_seeds.cpp — writes the fuzz seeds into the folder given as argv[1] (used by scripts/fuzz.sh).
#include <cstdio>
#include <fstream>
#include <string>

#include "dsml_fuzz_entry.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dsml_make_seeds DIR\n");
    return 2;
  }
  const auto seeds = ds4::chat::fuzz::seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream f(std::string(argv[1]) + "/seed_" + std::to_string(i), std::ios::binary);
    f << seeds[i];
  }
  return 0;
}
