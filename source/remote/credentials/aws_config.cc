#include "source/remote/credentials/aws_config.h"

namespace gpufs::remote {
namespace {

constexpr std::string_view kSpace = " \t\r";

std::string_view Trim(std::string_view s) {
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

bool IsComment(std::string_view trimmed) {
  return trimmed.empty() || trimmed[0] == '#' || trimmed[0] == ';';
}

// Reads one file line by line; `section_` and `parent_` carry what the lines above opened.
class IniParser {
 public:
  explicit IniParser(std::string_view file) : file_(file) {}

  Result<IniFile> Parse(std::string_view text) {
    size_t number = 0;
    while (!text.empty()) {
      const size_t end = text.find('\n');
      const std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
      ++number;
      Status parsed = Line(line);
      if (!parsed.ok()) {
        return Fail(EINVAL, "cannot parse {}:{}: {}", file_, number, parsed.error().message);
      }
    }
    return std::move(ini_);
  }

 private:
  Status Line(std::string_view line) {
    const std::string_view trimmed = Trim(line);
    if (IsComment(trimmed)) return Ok{};
    const bool indented = line[0] == ' ' || line[0] == '\t';
    if (trimmed[0] == '[') return Section(trimmed);
    if (section_ == nullptr) return Fail(EINVAL, "a setting before any [section]");
    const size_t eq = trimmed.find('=');
    if (eq == std::string_view::npos) return Fail(EINVAL, "neither [section] nor key = value");
    const std::string key(Trim(trimmed.substr(0, eq)));
    const std::string value(Trim(trimmed.substr(eq + 1)));
    if (key.empty()) return Fail(EINVAL, "a setting with no key");
    if (indented && !parent_.empty()) {
      (*section_)[parent_ + "." + key] = value;
      return Ok{};
    }
    (*section_)[key] = value;
    parent_ = value.empty() ? key : "";
    return Ok{};
  }

  Status Section(std::string_view trimmed) {
    if (trimmed.back() != ']') return Fail(EINVAL, "a section header without ']'");
    const std::string_view name = Trim(trimmed.substr(1, trimmed.size() - 2));
    if (name.empty()) return Fail(EINVAL, "a section with no name");
    section_ = &ini_[std::string(name)];
    parent_.clear();
    return Ok{};
  }

  std::string_view file_;
  IniFile ini_;
  IniSection* section_ = nullptr;  // the section open now, in ini_
  std::string parent_;             // the key whose nested settings may follow
};

}  // namespace

Result<IniFile> ParseIni(std::string_view text, std::string_view file) {
  return IniParser(file).Parse(text);
}

const IniSection* FindProfile(const IniFile& ini, std::string_view profile, bool config_file) {
  const IniSection* found = nullptr;
  for (const auto& [name, section] : ini) {
    std::string_view wanted = name;
    if (config_file && wanted.substr(0, 7) == "profile" && wanted.find_first_of(kSpace) == 7) {
      wanted = Trim(wanted.substr(7));
    } else if (config_file && wanted != "default") {
      continue;  // [sso-session x], [services x], ...
    }
    // `[profile default]` and `[default]` both name the default profile; the plain one wins.
    if (wanted == profile && (found == nullptr || name == profile)) found = &section;
  }
  return found;
}

}  // namespace gpufs::remote
