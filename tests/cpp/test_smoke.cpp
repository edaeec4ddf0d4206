#include <gtest/gtest.h>

#include "pcops/pcops.hpp"

TEST(Version, MatchesConstants) {
  EXPECT_STREQ(pcops::version_string(), "0.1.0");
  EXPECT_EQ(pcops::version_major, 0);
}
