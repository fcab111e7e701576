// The table of gpufsd mount's options: each option declared once, with a group, a help, a
// fstab key and a default that parses back to itself; -o keys mean what the options mean.
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <set>

#include "cli/options/mount_options.h"
#include "tests/unit/parse_mount_args.h"

namespace gpufs {
namespace {

MountArgs Parse(std::vector<std::string> words) { return ParseMountArgs(std::move(words)); }

TEST(MountOptions, EachHasOneNameAKeyAGroupAndAHelp) {
  std::set<std::string> names, keys;
  const auto groups = MountOptionGroups();
  for (const MountOption& option : MountOptionTable()) {
    EXPECT_TRUE(names.insert(std::string(option.name)).second) << option.name;
    EXPECT_TRUE(keys.insert(FstabKey(option)).second) << option.name;
    EXPECT_NE(std::find(groups.begin(), groups.end(), option.group), groups.end()) << option.name;
    EXPECT_FALSE(option.help.empty()) << option.name;
    EXPECT_EQ(option.name.find('_'), std::string_view::npos) << option.name;
    const auto fuse = FuseMountOptions();
    EXPECT_EQ(std::find(fuse.begin(), fuse.end(), FstabKey(option)), fuse.end()) << option.name;
  }
  EXPECT_GT(names.size(), 40u);
}

TEST(MountOptions, EachDefaultParsesBackToItself) {
  for (const MountOption& option : MountOptionTable()) {
    if (IsFlag(option) || !option.default_text.empty()) continue;
    SCOPED_TRACE(option.name);
    const std::string shown = DefaultText(option);
    ASSERT_FALSE(shown.empty());
    const MountArgs args = Parse({"--" + std::string(option.name), shown, "SRC", "MNT"});
    EXPECT_EQ(ValueText(option, args), shown);
  }
}

TEST(MountOptions, SizesAndSecondsAreShownAsPeopleWriteThem) {
  MountArgs defaults;
  for (const MountOption& option : MountOptionTable()) {
    if (option.name == "peer-block") EXPECT_EQ(DefaultText(option), "4MiB");
    if (option.name == "min-rate") EXPECT_EQ(DefaultText(option), "1MiB");
    if (option.name == "retry-seconds") EXPECT_EQ(DefaultText(option), "20");
    if (option.name == "cache-size")
      EXPECT_EQ(DefaultText(option), "a quarter of RAM, at most the dataset");
    if (option.name == "connections") {
      EXPECT_EQ(DefaultText(option), std::to_string(remote::StoreConfig{}.connections));
    }
  }
}

TEST(MountOptions, EveryFstabKeyMeansItsOption) {
  for (const MountOption& option : MountOptionTable()) {
    if (!option.fstab || option.kind == OptionKind::kChoice) continue;
    SCOPED_TRACE(option.name);
    std::string value = IsFlag(option) ? "" : (option.kind == OptionKind::kSize ? "8MiB" : "3");
    if (option.kind == OptionKind::kText || option.kind == OptionKind::kPath) value = "/x";
    const std::string key = FstabKey(option) + (value.empty() ? "" : "=" + value);
    std::vector<std::string> flag = {"--" + std::string(option.name)};
    if (!value.empty()) flag.push_back(value);
    flag.insert(flag.end(), {"SRC", "MNT"});
    EXPECT_EQ(MountCommandLine(Parse({"-o", key, "SRC", "MNT"})), MountCommandLine(Parse(flag)));
  }
}

TEST(MountOptions, OKeysMixWithFuseAndMountOptions) {
  const MountArgs args =
      Parse({"-o", "cache_size=1GiB,ro,allow_other,_netdev,x-systemd.automount,nonempty",
             "-ono-disk-cache", "SRC", "MNT"});
  EXPECT_EQ(args.cache_bytes, 1u << 30);
  EXPECT_TRUE(args.allow_non_empty);
  EXPECT_TRUE(args.no_disk_cache);
  EXPECT_EQ(args.fuse_options, std::vector<std::string>{"allow_other"});
  EXPECT_EQ(MountCommandLine(args),
            (std::vector<std::string>{"--allow-non-empty", "--cache-size", "1GiB",
                                      "--no-disk-cache", "-o", "allow_other", "SRC", "MNT"}));
}

TEST(MountOptions, BadOKeysAreRefusedNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cache_sise=1GiB", "unknown option 'cache_sise' in -o (did you mean cache_size?)"},
      {"cache_size", "cache_size needs a value"},
      {"no_disk_cache=yes", "no_disk_cache takes no value"},
      {"peers=http://a:3128", "peers_file=FILE"},
      {"foreground", "unknown option 'foreground'"}};
  for (const auto& [item, message] : cases) {
    auto expanded = ExpandMountOptions({"-o", item, "SRC", "MNT"});
    ASSERT_FALSE(expanded) << item;
    EXPECT_NE(expanded.error().message.find(message), std::string::npos)
        << expanded.error().message;
  }
  auto sloppy = ExpandMountOptions({"--sloppy", "-o", "bogus,cache_size=1GiB", "SRC", "MNT"});
  ASSERT_TRUE(sloppy);
  EXPECT_EQ(*sloppy, (std::vector<std::string>{"--sloppy", "--cache-size", "1GiB", "SRC", "MNT"}));
}

TEST(MountOptions, TheListingNamesEveryOptionItsKeyAndDefault) {
  const std::string markdown = MountOptionListing(true);
  for (const MountOption& option : MountOptionTable()) {
    EXPECT_NE(markdown.find("--" + std::string(option.name)), std::string::npos);
  }
  EXPECT_NE(
      markdown.find(
          "| `--cache-size SIZE` | `cache_size=SIZE` | a quarter of RAM, at most the dataset |"),
      std::string::npos);
  EXPECT_NE(markdown.find("| `-f, --foreground` | command line only | off |"), std::string::npos);
  EXPECT_NE(MountOptionListing(false).find("  --connections N              -o connections=N\n"),
            std::string::npos);
}

}  // namespace
}  // namespace gpufs
