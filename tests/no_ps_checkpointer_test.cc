// A coordinator started without a PS checkpointer (no
// CoordinatorServerOptions::checkpointer_factory) refuses every PS
// checkpoint naming the option, instead of reaching for a client itself.
#include "coordinator/ps_checkpointer.h"

#include <string>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(NoPsCheckpointerTest, EveryCallNamesTheMissingFactory) {
  NoPsCheckpointer none;
  for (const absl::Status& s :
       {none.SaveAll("ckpt-1"), none.RestoreAll("ckpt-1"),
        none.DeleteAll({"ckpt-0"})}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(std::string(s.message()).find("checkpointer_factory"),
              std::string::npos)
        << s;
  }
  EXPECT_NE(std::string(none.SaveAll("x").message()).find("cannot save"),
            std::string::npos);
  EXPECT_NE(std::string(none.RestoreAll("x").message()).find("cannot restore"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
