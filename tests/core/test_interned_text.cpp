// InternedText: equal texts share one handle whatever they were read from, different texts never do, and a buffer
// reused for another text (the per-thread cache is keyed by address) reads as its new text.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "hzp/core/interned_text.hpp"

namespace hzp {
namespace {

TEST(InternedText, EqualTextsShareOneHandle) {
  const std::string a = "per micro-batch (ring attention: K, V, dK, dV)";
  const std::string b(a.begin(), a.end());  // another buffer, the same text
  const InternedText x(a), y(b), z(a.c_str());
  EXPECT_EQ(x.id(), y.id());
  EXPECT_EQ(x.id(), z.id());
  EXPECT_EQ(x.str(), a);
  EXPECT_NE(x.str().data(), a.data());  // its own copy, alive after the source is gone
  EXPECT_EQ(InternedText().id(), InternedText("").id());
  EXPECT_TRUE(InternedText().empty());
}

TEST(InternedText, DifferentTextsDiffer) {
  const InternedText x("per step"), y("per step (norm)"), z("per ste");
  EXPECT_NE(x.id(), y.id());
  EXPECT_NE(x.id(), z.id());
  EXPECT_FALSE(x == y);
  EXPECT_TRUE(x == "per step");
  EXPECT_FALSE(x == "per step ");
}

TEST(InternedText, ReusedBufferReadsItsNewText) {
  std::string buf = "per micro-batch (row-parallel outputs) ........";
  const InternedText first(buf);
  // Same address and length, other characters: the cache must not answer with the first text.
  buf[17] = 'c';
  const char* at = buf.data();
  const InternedText second(buf);
  ASSERT_EQ(buf.data(), at);
  EXPECT_EQ(second.str(), buf);
  EXPECT_NE(first.id(), second.id());
  // Shorter text from the same address.
  buf.resize(8);
  EXPECT_EQ(InternedText(buf).str(), "per micr");
  EXPECT_EQ(InternedText(buf).id(), InternedText("per micr").id());
}

TEST(InternedText, ThreadsAgreeOnHandles) {
  std::uintptr_t other = 0;
  std::thread t([&] { other = InternedText("tp").id(); });
  t.join();
  EXPECT_EQ(other, InternedText(std::string("tp")).id());
}

}  // namespace
}  // namespace hzp
