#include <gtest/gtest.h>
TEST(TokenizerUnit, Placeholder) {}
