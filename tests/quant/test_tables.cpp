// test_tables.cpp — the committed IQ2_XXS arrays: the three checks of FORMATS.md §2.6 on the arrays
// themselves, and equality with /work/shared/spec/data when that folder is present.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "quant/iq2xxs_tables.h"

namespace ds4 {
namespace {

TEST(Iq2xxsTables, GridMatchesKgridAndIsIncreasing) {
  constexpr uint8_t kLevels[3] = {0x08, 0x19, 0x2b};
  for (int k = 0; k < 256; ++k) {
    for (int i = 0; i < 8; ++i) {
      const int lvl = (kIq2xxsKgrid[k] >> (2 * i)) & 3;
      ASSERT_LT(lvl, 3) << k;
      ASSERT_EQ((kIq2xxsGrid[k] >> (8 * i)) & 0xff, kLevels[lvl]) << k << " " << i;
    }
    if (k > 0) {
      ASSERT_LT(kIq2xxsGrid[k - 1], kIq2xxsGrid[k]);
      ASSERT_LT(kIq2xxsKgrid[k - 1], kIq2xxsKgrid[k]);
    }
  }
  EXPECT_EQ(kIq2xxsGrid[0], 0x0808080808080808ull);
  EXPECT_EQ(kIq2xxsGrid[1], 0x080808080808082bull);
  EXPECT_EQ(kIq2xxsGrid[2], 0x0808080808081919ull);
  EXPECT_EQ(kIq2xxsGrid[255], 0x2b2b2b1908081908ull);
}

TEST(Iq2xxsTables, SignTableHasEvenParity) {
  for (int i = 0; i < 128; ++i) ASSERT_EQ(kKsignsIq2xs[i], i | ((std::popcount(static_cast<unsigned>(i)) & 1) << 7));
}

std::vector<uint64_t> read_hex_lines(const std::string& path) {
  std::vector<uint64_t> v;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(std::stoull(line, nullptr, 16));
  return v;
}

TEST(Iq2xxsTables, EqualSpecDataFiles) {
  const std::string dir = DS4_SPEC_DATA_DIR;
  if (!std::filesystem::exists(dir + "/iq2xxs_grid.txt")) GTEST_SKIP() << "spec data not present at " << dir;
  const auto grid = read_hex_lines(dir + "/iq2xxs_grid.txt");
  const auto kgrid = read_hex_lines(dir + "/iq2xxs_kgrid.txt");
  const auto ksigns = read_hex_lines(dir + "/ksigns_iq2xs.txt");
  ASSERT_EQ(grid.size(), 256u);
  ASSERT_EQ(kgrid.size(), 256u);
  ASSERT_EQ(ksigns.size(), 128u);
  for (int k = 0; k < 256; ++k) {
    EXPECT_EQ(grid[k], kIq2xxsGrid[k]) << k;
    EXPECT_EQ(kgrid[k], kIq2xxsKgrid[k]) << k;
  }
  for (int k = 0; k < 128; ++k) EXPECT_EQ(ksigns[k], kKsignsIq2xs[k]) << k;
}

}  // namespace
}  // namespace ds4
