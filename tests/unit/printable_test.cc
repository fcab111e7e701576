#include "dataset/printable.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

namespace gpufs {
namespace {

TEST(Printable, WritesEveryControlByteAndTheBackslashAsHex) {
  std::string all;
  for (int c = 1; c < 0x20; ++c) all += static_cast<char>(c);
  all += '\x7f';
  all += '\\';
  std::string expected;
  for (int c = 1; c < 0x20; ++c) expected += fmt::format("\\x{:02x}", c);
  expected += "\\x7f\\x5c";
  EXPECT_EQ(Printable(all), expected);
  EXPECT_EQ(Printable(std::string_view("a\0b", 3)), "a\\x00b");
}

TEST(Printable, KeepsUtf8NamesButNotC1ControlsBidiMarksOrInvalidBytes) {
  EXPECT_EQ(Printable("n01440764 tench"), "n01440764 tench");
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe7\x8c\xab \xf0\x9f\x90\x88"),
            "caf\xc3\xa9 \xe7\x8c\xab \xf0\x9f\x90\x88");
  EXPECT_EQ(Printable("a\xc2\x9b"
                      "2Jb"),
            "a\\xc2\\x9b2Jb");                                  // CSI, the C1 form of ESC [
  EXPECT_EQ(Printable("x\xe2\x80\xaey"), "x\\xe2\\x80\\xaey");  // right-to-left override
  EXPECT_EQ(Printable("\xff\xc3"), "\\xff\\xc3");               // not UTF-8, truncated
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");               // overlong '/'
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");      // a surrogate
}

TEST(Printable, LineKeepsBackslashesSoEscapedNamesAreNotEscapedTwice) {
  const std::string message = "cannot read " + Printable("c\x1b/x") + ": cut short";
  EXPECT_EQ(message, "cannot read c\\x1b/x: cut short");
  EXPECT_EQ(PrintableLine(message), message);
  EXPECT_EQ(PrintableLine("one\ntwo\r"), "one\\x0atwo\\x0d");
}

TEST(KvValue, QuotesWhatWouldSplitOrForgeAField) {
  EXPECT_EQ(KvValue("n01440764"), "n01440764");
  EXPECT_EQ(KvValue("a Files=0"), "\"a Files=0\"");
  EXPECT_EQ(KvValue("x=1"), "\"x=1\"");
  EXPECT_EQ(KvValue("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(KvValue("a\nFiles=0"), "\"a\\x0aFiles=0\"");
  EXPECT_EQ(KvValue(""), "\"\"");
}

}  // namespace
}  // namespace gpufs
