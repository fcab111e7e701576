// `gpufsd mount`'s options as people read them: values and defaults in the units they
// write ("8GiB", "20s"), the command line a set of options amounts to, and the listing of
// `gpufsd options` (the user guide's table is this listing in Markdown).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "base/sizes.h"
#include "cli/options/mount_options.h"
#include "cli/options/overloaded.h"

namespace gpufs {
namespace {

// Whole, in a unit ParseSize reads back exactly ("4MiB", "1GB").
std::string ExactSize(uint64_t bytes) {
  return FormatSize(bytes, {.exact = true, .largest = SizeScale::kTera, .separator = ""});
}

std::string SecondsText(double seconds) { return fmt::format("{}", seconds); }

// `args` is not changed; the fields are reached as the parser reaches them.
std::string Text(const MountOption& option, MountArgs& args) {
  return std::visit(Overloaded{[&](FieldOf<bool> f) -> std::string {
                                 const bool on = f(args);
                                 return on == (option.kind == OptionKind::kFlag) ? "on" : "";
                               },
                               [&](FieldOf<std::chrono::milliseconds> f) {
                                 return SecondsText(f(args).count() / 1000.0);
                               },
                               [&](FieldOf<DirPlus> f) -> std::string {
                                 const DirPlus value = f(args);
                                 if (option.kind == OptionKind::kFixed) {
                                   return value == *ParseDirPlus(option.fixed) ? "on" : "";
                                 }
                                 return std::string(DirPlusName(value));
                               },
                               [&](FieldOf<std::optional<uint32_t>> f) -> std::string {
                                 const auto& value = f(args);
                                 return value ? std::to_string(*value) : "";
                               },
                               [&](FieldOf<uint64_t> f) -> std::string {
                                 const uint64_t value = f(args);
                                 return option.kind == OptionKind::kSize ? ExactSize(value)
                                                                         : std::to_string(value);
                               },
                               [&](FieldOf<double> f) { return SecondsText(f(args)); },
                               [&](FieldOf<std::string> f) { return f(args); },
                               [&](auto f) { return std::to_string(f(args)); }},
                    option.field);
}

std::string Escaped(std::string_view text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// `text` in lines of at most `width` columns, each indented by `indent`.
std::string Wrapped(std::string_view text, size_t indent, size_t width) {
  std::string out, line;
  std::istringstream words{std::string(text)};
  for (std::string word; words >> word;) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += std::string(indent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += std::string(indent, ' ') + line + "\n";
  return out;
}

}  // namespace

bool IsFlag(const MountOption& option) {
  return option.kind == OptionKind::kFlag || option.kind == OptionKind::kClear ||
         option.kind == OptionKind::kFixed;
}

std::string ValueName(const MountOption& option) {
  switch (option.kind) {
    case OptionKind::kNumber:
      return "N";
    case OptionKind::kSize:
      return "SIZE";
    case OptionKind::kSeconds:
      return "SECONDS";
    case OptionKind::kChoice:
      return fmt::format("{{{}}}", fmt::join(option.choices, ","));
    case OptionKind::kPath:
      return "PATH";
    case OptionKind::kText:
      return option.name == "endpoint" ? "URL" : "TEXT";
    default:
      return "";
  }
}

std::string ValueText(const MountOption& option, const MountArgs& args) {
  MountArgs copy = args;
  return Text(option, copy);
}

std::string DefaultText(const MountOption& option) {
  if (!option.default_text.empty()) return std::string(option.default_text);
  if (IsFlag(option)) return "";
  // Read from a default MountArgs: the field's own initializer is the one default.
  MountArgs defaults;
  return Text(option, defaults);
}

std::vector<std::string> MountCommandLine(const MountArgs& args_in) {
  MountArgs args = args_in, defaults;
  // What the options amount to once read: how they were read is not part of it.
  args.dry_run = args.sloppy = false;
  std::vector<std::string> line;
  for (const MountOption& option : MountOptionTable()) {
    const std::string value = Text(option, args);
    if (value.empty() || value == Text(option, defaults)) continue;
    line.push_back("--" + std::string(option.name));
    if (!IsFlag(option)) line.push_back(value);
  }
  if (!args.fuse_options.empty()) {
    line.push_back("-o");
    line.push_back(fmt::format("{}", fmt::join(args.fuse_options, ",")));
  }
  line.push_back(args.source);
  line.push_back(args.mountpoint);
  return line;
}

// "--cache-size SIZE" and "cache_size=SIZE", or "" for an option fstab has no use for.
std::pair<std::string, std::string> Spellings(const MountOption& option) {
  const std::string value = ValueName(option);
  const std::string key = FstabKey(option) + (value.empty() ? "" : "=" + value);
  const std::string brief = option.short_name ? fmt::format("-{}, ", option.short_name) : "";
  return {fmt::format("{}--{}{}", brief, option.name, value.empty() ? "" : " " + value),
          option.fstab ? key : ""};
}

std::string MountOptionListing(bool markdown) {
  std::ostringstream out;
  for (std::string_view group : MountOptionGroups()) {
    out << (markdown ? fmt::format("\n**{}**\n\n| option | fstab, -o | default | what |\n"
                                   "|---|---|---|---|\n",
                                   group)
                     : fmt::format("\n{}:\n", group));
    for (const MountOption& option : MountOptionTable()) {
      if (option.group != group) continue;
      const auto [flag, key] = Spellings(option);
      const std::string shown = DefaultText(option);
      if (markdown) {
        out << fmt::format("| `{}` | {} | {} | {} |\n", flag,
                           key.empty() ? "command line only" : "`" + key + "`",
                           shown.empty() ? "off" : Escaped(shown), Escaped(option.help));
      } else {
        out << fmt::format(
            "  {:<28} {}\n{}", flag, key.empty() ? "(command line only)" : "-o " + key,
            Wrapped(
                fmt::format("{}{}", option.help, shown.empty() ? "" : " [default: " + shown + "]"),
                6, 90));
      }
    }
  }
  return out.str();
}

std::string MountOptionsJson() {
  nlohmann::json groups = nlohmann::json::array();
  for (std::string_view group : MountOptionGroups()) {
    nlohmann::json options = nlohmann::json::array();
    for (const MountOption& option : MountOptionTable()) {
      if (option.group != group) continue;
      const auto [flag, key] = Spellings(option);
      options.push_back(
          {{"name", "--" + std::string(option.name)},
           {"short", option.short_name ? std::string("-") + option.short_name : ""},
           {"value", ValueName(option)},
           {"choices", std::vector<std::string>(option.choices.begin(), option.choices.end())},
           {"path", option.kind == OptionKind::kPath},
           {"fstab", key},
           {"default", DefaultText(option)},
           {"help", std::string(option.help)}});
    }
    groups.push_back({{"group", std::string(group)}, {"options", std::move(options)}});
  }
  return groups.dump(1) + "\n";
}

}  // namespace gpufs
