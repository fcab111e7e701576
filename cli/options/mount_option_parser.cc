// `gpufsd mount`'s command line from the table: the CLI11 options, grouped as --help
// shows them, and the -o keys that fstab and mount(8) pass.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "base/sizes.h"
#include "cli/options/kernel_limits.h"
#include "cli/options/mount_options.h"
#include "cli/options/overloaded.h"
#include "cli/options/sizes.h"
#include "cli/options/usage.h"
#include "dataset/format/source_advice.h"

namespace gpufs {
namespace {

std::string Flags(const MountOption& option) {
  std::string flags = "--" + std::string(option.name);
  if (option.short_name) flags += std::string(",-") + option.short_name;
  return flags;
}

// --name for a flag: sets, clears or fixes its field.
CLI::Option* AddFlag(CLI::App& app, const MountOption& option, MountArgs& args) {
  const std::string help(option.help);
  return std::visit(Overloaded{[&](FieldOf<bool> field) -> CLI::Option* {
                                 bool& value = field(args);
                                 const bool set = option.kind == OptionKind::kFlag;
                                 return app.add_flag_callback(
                                     Flags(option), [&value, set] { value = set; }, help);
                               },
                               [&](FieldOf<DirPlus> field) -> CLI::Option* {
                                 DirPlus& value = field(args);
                                 const DirPlus fixed = *ParseDirPlus(option.fixed);
                                 return app.add_flag_callback(
                                     Flags(option), [&value, fixed] { value = fixed; }, help);
                               },
                               [&](auto) -> CLI::Option* { std::abort(); }},
                    option.field);
}

// --name VALUE, converted and checked as its kind says. The checks' own descriptions are
// left out of --help: the type name and the help say what is taken.
CLI::Option* AddValue(CLI::App& app, const MountOption& option, MountArgs& args) {
  const std::string help(option.help);
  const std::string flags = Flags(option);
  return std::visit(
      Overloaded{[&](FieldOf<std::chrono::milliseconds> field) {
                   auto& value = field(args);
                   return app.add_option_function<double>(
                       flags,
                       [&value](double s) {
                         value = std::chrono::milliseconds(std::llround(s * 1000));
                       },
                       help);
                 },
                 [&](FieldOf<DirPlus> field) {
                   auto& value = field(args);
                   return app.add_option_function<std::string>(
                       flags, [&value](const std::string& s) { value = *ParseDirPlus(s); }, help);
                 },
                 [&](FieldOf<bool>) -> CLI::Option* { std::abort(); },
                 [&](auto field) { return app.add_option(flags, field(args), help); }},
      option.field);
}

// Why a size of `bytes` (written `text`) is outside an option's bounds, if it has them.
std::string SizeBoundProblem(const MountOption& option, uint64_t bytes, std::string_view text) {
  const double least = std::max(1.0, option.low);
  if (option.high == 0 || (bytes >= least && bytes <= option.high)) return {};
  return fmt::format("{} is out of range: give {} to {}", text,
                     FormatSize(static_cast<uint64_t>(least)),
                     FormatSize(static_cast<uint64_t>(option.high)));
}

// Why `value` is not one `option` takes, in words a person acts on; empty when it is.
// The command line (through CLI11) and -o lists check alike.
std::string ValueProblem(const MountOption& option, const std::string& value) {
  switch (option.kind) {
    case OptionKind::kNumber:
    case OptionKind::kSeconds: {
      double number = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
      if (ec != std::errc() || end != value.data() + value.size()) {
        return fmt::format("'{}' is not a number", value);
      }
      if (option.kind == OptionKind::kNumber && number != std::floor(number)) {
        return fmt::format("'{}' is not a whole number", value);
      }
      if (number < option.low || number > option.high) {
        return fmt::format("{} is out of range: give {} to {}", value, option.low, option.high);
      }
      return {};
    }
    case OptionKind::kSize: {
      auto bytes = ParseSize(value, static_cast<uint64_t>(option.low));
      return bytes ? SizeBoundProblem(option, *bytes, value) : bytes.error().message;
    }
    case OptionKind::kChoice:
      if (std::find(option.choices.begin(), option.choices.end(), value) != option.choices.end()) {
        return {};
      }
      return fmt::format("'{}' is not one of {}", value, fmt::join(option.choices, ", "));
    default:
      return {};
  }
}

// CLI11 runs a transform before the checks: a size is parsed (and a bare number too small
// to be meant refused) by SizeValue, and its byte count then held to the option's bounds.
void Check(CLI::Option& cli, const MountOption& option) {
  const MountOption* checked = &option;
  if (option.kind != OptionKind::kSize) {
    cli.check(CLI::Validator(
        [checked](std::string& value) { return ValueProblem(*checked, value); }, ""));
    return;
  }
  cli.transform(SizeValue(static_cast<uint64_t>(option.low)).description(""));
  cli.check(CLI::Validator(
      [checked](std::string& bytes) {
        return SizeBoundProblem(*checked, std::stoull(bytes), bytes + " bytes");
      },
      ""));
}

const MountOption* FindByKey(std::string_view key) {
  for (const MountOption& option : MountOptionTable()) {
    if (FstabKey(option) == key) return &option;
  }
  return nullptr;
}

bool Listed(std::span<const std::string_view> list, std::string_view word) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

std::vector<std::string> EveryKey() {
  std::vector<std::string> keys;
  for (const MountOption& option : MountOptionTable()) {
    if (option.fstab) keys.push_back(FstabKey(option));
  }
  for (std::string_view key : FuseMountOptions()) keys.emplace_back(key);
  return keys;
}

// One item of an -o list: appended to `out` as an option, to `fuse` for libfuse, or
// dropped. A `key` is written with '_' or '-' alike.
Status ExpandItem(std::string_view item, bool sloppy, std::vector<std::string>& out,
                  std::string& fuse) {
  const size_t eq = item.find('=');
  std::string key(item.substr(0, eq));
  if (key.starts_with("x-") || key.starts_with("X-")) return Ok{};  // systemd's and others'
  std::replace(key.begin(), key.end(), '-', '_');
  if (key == "nonempty") key = "allow_non_empty";  // FUSE 2's name, which fstab lines carry
  if (key.empty() || Listed(MountOnlyOptions(), key)) return Ok{};
  if (Listed(FuseMountOptions(), key)) {
    if ((key == "max_read") != (eq != item.npos)) {
      return Fail(EINVAL, "-o {}: {} {}", item, key,
                  key == "max_read" ? "needs a value" : "takes no value");
    }
    fuse += (fuse.empty() ? "" : ",") + key + std::string(eq == item.npos ? "" : item.substr(eq));
    return Ok{};
  }
  const MountOption* option = FindByKey(key);
  if (option && option->fstab) {
    const bool flag = IsFlag(*option);
    if (flag && eq != item.npos) return Fail(EINVAL, "-o {}: {} takes no value", item, key);
    if (!flag && eq == item.npos) return Fail(EINVAL, "-o {}: {} needs a value", item, key);
    if (!flag) {
      const std::string value(item.substr(eq + 1));
      if (std::string problem = ValueProblem(*option, value); !problem.empty()) {
        return Fail(EINVAL, "-o {}: {}", item, problem);
      }
    }
    out.push_back("--" + std::string(option->name));
    if (!flag) out.emplace_back(item.substr(eq + 1));
    return Ok{};
  }
  if (key == "peers") {
    return Fail(EINVAL,
                "-o {}: an -o value cannot hold commas; list the peers one a line "
                "in a file and give peers_file=FILE",
                item);
  }
  if (sloppy) {
    fmt::print(stderr, "gpufsd: ignoring unknown option '{}'\n", item);
    return Ok{};
  }
  const std::string near = NearestWord(key, EveryKey());
  return Fail(EINVAL, "unknown option '{}' in -o{}; `gpufsd options` lists them", key,
              near.empty() ? "" : fmt::format(" (did you mean {}?)", near));
}

}  // namespace

uint64_t MountArgs::DefaultCacheBytes() {
  const uint64_t memory = MemoryLimit();
  return memory > 0 ? memory / 4 : (1ull << 30);
}

std::string FstabKey(const MountOption& option) {
  std::string key(option.name);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

void AddMountOptions(CLI::App& mount, MountArgs& args) {
  mount
      .add_option("SRC", args.source,
                  "dataset: a native pack, a mytar folder (or its parent), or an archive (.tar, "
                  ".zip, .tar.gz/.tgz) served in place; a local path, s3://BUCKET/PREFIX/ or "
                  "http(s)://HOST/PATH/")
      ->required()
      ->type_name("SRC");
  mount.add_option("MNT", args.mountpoint, "an existing empty folder to mount at")
      ->required()
      ->type_name("PATH");
  mount
      .add_option("-o", args.fuse_options,
                  "options, comma-separated: any below by its key (cache_size=8GiB, "
                  "no_disk_cache) and FUSE's (allow_other, ...); repeatable")
      ->type_name("OPTIONS")
      ->group(std::string(MountOptionGroups().front()));
  for (const MountOption& option : MountOptionTable()) {
    const bool flag = IsFlag(option);
    CLI::Option* cli = flag ? AddFlag(mount, option, args) : AddValue(mount, option, args);
    const std::string shown = DefaultText(option);
    cli->group(std::string(option.group));
    if (!flag) {
      cli->type_name(ValueName(option));
      Check(*cli, option);
    }
    if (!shown.empty()) cli->description(cli->get_description() + " [default: " + shown + "]");
  }
  mount.get_option("--peers-file")->excludes(mount.get_option("--peers"));
}

void AnchorPaths(MountArgs& args) {
  const auto anchor = [](std::string& path) {
    std::error_code ec;
    if (path.empty() || path.front() == '/') return;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (!ec) path = absolute.lexically_normal().string();
  };
  if (!remote::IsRemoteUrl(args.source) && !HasUrlScheme(args.source)) anchor(args.source);
  anchor(args.mountpoint);
  for (const MountOption& option : MountOptionTable()) {
    if (option.kind != OptionKind::kPath) continue;
    if (auto* field = std::get_if<FieldOf<std::string>>(&option.field)) anchor((*field)(args));
  }
}

Status CheckCacheFits(const MountArgs& args) {
  const uint64_t memory = MemoryLimit();
  if (memory == 0 || args.cache_bytes <= memory) return Ok{};
  return Fail(EINVAL,
              "cannot use --cache-size {}: more than the memory this process may use ({}{}); "
              "the cache is "
              "pinned in RAM, so give it at most about half of it (the default, a quarter, is {})",
              FormatSize(args.cache_bytes), FormatSize(memory),
              memory < PhysicalMemory() ? ", its cgroup's limit" : "",
              FormatSize(MountArgs::DefaultCacheBytes()));
}

Result<std::vector<std::string>> ExpandMountOptions(std::vector<std::string> args) {
  const bool sloppy = Listed(std::vector<std::string_view>(args.begin(), args.end()), "--sloppy");
  std::vector<std::string> out, operands;
  std::string fuse;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      operands.assign(args.begin() + i, args.end());
      break;
    }
    if (!args[i].starts_with("-o")) {
      out.push_back(args[i]);
      continue;
    }
    std::string list = args[i].substr(2);
    if (list.empty() && i + 1 < args.size()) list = args[++i];
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(',', start), list.size());
      if (Status s =
              ExpandItem(std::string_view(list).substr(start, end - start), sloppy, out, fuse);
          !s) {
        return s.error();
      }
      start = end + 1;
    }
  }
  if (!fuse.empty()) out.insert(out.end(), {"-o", fuse});
  out.insert(out.end(), operands.begin(), operands.end());
  return out;
}

}  // namespace gpufs
