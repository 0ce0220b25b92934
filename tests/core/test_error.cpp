// Error types and check macros: the message carries the statement, the detail and the location.
#include <gtest/gtest.h>

#include "hzp/core/error.hpp"

namespace hzp {
namespace {

const char* describe_fake(int code) { return code == 7 ? "seven is bad" : "other"; }
int fake_call(int rc) { return rc; }

TEST(Error, CheckPassesAndFailsWithMessage) {
  EXPECT_NO_THROW(HZP_CHECK(1 + 1 == 2, "never"));
  try {
    const int n = 10, w = 3;
    HZP_CHECK(n % w == 0, "n=", n, " is not divisible by w=", w);
    FAIL() << "no throw";
  } catch (const PreconditionError& e) {
    EXPECT_EQ(e.code(), ErrorCode::precondition);
    EXPECT_NE(e.message().find("n=10 is not divisible by w=3"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("n % w == 0"), std::string::npos) << e.what();
    EXPECT_NE(e.context().find("test_error.cpp"), std::string::npos) << e.context();
    EXPECT_NE(std::string(e.what()).find("[precondition error]"), std::string::npos);
  }
}

TEST(Error, CheckWithoutMessage) {
  try {
    HZP_CHECK(false);
    FAIL();
  } catch (const PreconditionError& e) {
    EXPECT_NE(e.message().find("[check: false]"), std::string::npos) << e.what();
  }
}

TEST(Error, CallCheckEvaluatesOnceAndDescribes) {
  int calls = 0;
  auto counted = [&](int rc) {
    ++calls;
    return rc;
  };
  EXPECT_NO_THROW(HZP_CHECK_CALL(counted(0), MpiError, hzp_status == 0, describe_fake));
  EXPECT_EQ(calls, 1);
  try {
    HZP_CHECK_CALL(fake_call(7), MpiError, hzp_status == 0, describe_fake);
    FAIL();
  } catch (const MpiError& e) {
    EXPECT_EQ(e.code(), ErrorCode::mpi);
    EXPECT_NE(e.message().find("fake_call(7) failed: seven is bad"), std::string::npos) << e.what();
  } catch (...) {
    FAIL() << "wrong type";
  }
}

TEST(Error, ContextCarriesRank) {
  set_process_rank(5);
  try {
    HZP_THROW(TimeoutError, "waited ", 3, " s");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_EQ(e.message(), "waited 3 s");
    EXPECT_NE(e.context().find("rank 5 on "), std::string::npos) << e.context();
  }
  set_process_rank(-1);
}

TEST(Error, AllTypesDeriveFromError) {
  EXPECT_THROW(throw CudaError("x"), Error);
  EXPECT_THROW(throw NcclError("x"), Error);
  EXPECT_THROW(throw Hdf5Error("x"), Error);
  EXPECT_THROW(throw ConfigError("x"), Error);
  EXPECT_STREQ(error_code_name(ErrorCode::hdf5), "HDF5");
}

}  // namespace
}  // namespace hzp
