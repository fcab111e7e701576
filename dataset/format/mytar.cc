#include "dataset/format/mytar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <fmt/ranges.h>

#include "base/file_io.h"
#include "dataset/format/name_rules.h"

namespace gpufs {
namespace {

struct Line {
  std::string_view text;
  uint32_t number = 0;
};

// Walks a text one line at a time; tolerates CRLF endings and a missing final newline.
class LineCursor {
 public:
  explicit LineCursor(std::string_view text) : text_(text) {}

  bool Next(Line* line) {
    if (pos_ >= text_.size()) return false;
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    std::string_view text = text_.substr(pos_, end - pos_);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    pos_ = end + 1;
    *line = Line{text, ++number_};
    return true;
  }

  // True when nothing but blank lines is left.
  bool OnlyBlankLeft() const {
    return text_.find_first_not_of("\r\n", std::min(pos_, text_.size())) == std::string_view::npos;
  }

  uint32_t number() const { return number_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  uint32_t number_ = 0;
};

template <typename T>
bool ParseUint(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// A member whose tree path is not known until the dataset root is.
struct PendingMember {
  std::string_view raw_path;
  MemberSpec spec;
};

class MytarParser {
 public:
  MytarParser(std::string_view text, const std::string& label) : lines_(text), label_(label) {}

  Result<DatasetSpec> Run() {
    if (Status s = ParseClasses(); !s) return s.error();
    if (Status s = ParseGroups(); !s) return s.error();
    if (Status s = ResolvePaths(); !s) return s.error();
    return std::move(spec_);
  }

 private:
  template <typename... Args>
  Error LineError(uint32_t line, fmt::format_string<Args...> format, Args&&... args) {
    return Error{EINVAL, fmt::format("cannot parse {} line {}: {}", label_, line,
                                     fmt::format(format, std::forward<Args>(args)...))};
  }

  Status ParseClasses() {
    Line line;
    if (!lines_.Next(&line)) return Fail(EINVAL, "cannot parse {}: the file is empty", label_);
    uint32_t count = 0;
    if (!ParseUint(line.text, &count)) {
      return LineError(line.number, "expected the number of classes, found '{}'", line.text);
    }
    if (count == 0) return LineError(line.number, "the dataset declares no classes");
    for (uint32_t i = 0; i < count; ++i) {
      if (!lines_.Next(&line)) {
        return LineError(lines_.number(), "{} classes are declared but the file ends after {}",
                         count, i);
      }
      if (std::string_view why = NameProblem(line.text); !why.empty()) {
        return LineError(line.number, "class name '{}' is invalid ({})", line.text, why);
      }
      auto [it, inserted] = class_ids_.emplace(line.text, ClassRef{i, line.number});
      if (!inserted) {
        return LineError(line.number, "class '{}' is already declared at line {}", line.text,
                         it->second.line);
      }
      spec_.classes.emplace_back(line.text);
    }
    return Ok{};
  }

  Status ParseGroups() {
    Line line;
    while (!lines_.OnlyBlankLeft() && lines_.Next(&line)) {
      if (line.text.empty()) return LineError(line.number, "unexpected empty line");
      auto count = ParseGroupHeader(line);
      if (!count) return count.error();
      const uint32_t group = static_cast<uint32_t>(spec_.groups.size() - 1);
      for (uint32_t j = 0; j < *count; ++j) {
        if (!lines_.Next(&line) || (line.text.empty() && lines_.OnlyBlankLeft())) {
          return LineError(spec_.groups.back().line,
                           "group '{}' declares {} members but the file ends after {}",
                           spec_.groups.back().blob, *count, j);
        }
        if (Status s = ParseMember(line, group, j); !s) return s;
      }
    }
    return Ok{};
  }

  Result<uint32_t> ParseGroupHeader(const Line& line) {
    size_t comma = line.text.rfind(',');
    if (comma == std::string_view::npos) {
      return LineError(line.number, "expected a group header '<blob>,<count>', found '{}'",
                       line.text);
    }
    std::string_view blob = line.text.substr(0, comma);
    uint32_t count = 0;
    if (!ParseUint(line.text.substr(comma + 1), &count) || count == 0) {
      return LineError(line.number, "group '{}' has an invalid member count '{}'", blob,
                       line.text.substr(comma + 1));
    }
    if (std::string_view why = NameProblem(blob); !why.empty()) {
      return LineError(line.number, "blob name '{}' is invalid ({})", blob, why);
    }
    auto [it, inserted] = blob_lines_.emplace(blob, line.number);
    if (!inserted) {
      return LineError(line.number, "blob '{}' is already declared at line {}", blob, it->second);
    }
    spec_.groups.push_back(GroupSpec{std::string(blob), 0, 0, line.number});
    return count;
  }

  Status ParseMember(const Line& line, uint32_t group, uint32_t expected_index) {
    size_t comma = line.text.find(',');
    uint32_t index = 0;
    if (comma == std::string_view::npos || !ParseUint(line.text.substr(0, comma), &index)) {
      return LineError(line.number,
                       "expected a member '<j>,<class>,<offset>,<size>,<path>', found '{}'",
                       line.text);
    }
    if (index != expected_index) {
      return LineError(line.number, "member index {} where {} was expected in group '{}'", index,
                       expected_index, spec_.groups[group].blob);
    }
    PendingMember member;
    member.spec.group = group;
    member.spec.line = line.number;
    if (Status s = ParseMemberFields(line, line.text.substr(comma + 1), &member); !s) return s;
    GroupSpec& g = spec_.groups[group];
    g.size = std::max(g.size, member.spec.offset + member.spec.size);
    if (Status s = NarrowRoots(member); !s) return s;
    pending_.push_back(member);
    return Ok{};
  }

  // Parses "<class>,<offset>,<size>,<path>" where the class name may itself hold commas:
  // each comma is tried as the end of the class field until a declared class matches.
  Status ParseMemberFields(const Line& line, std::string_view rest, PendingMember* member) {
    bool known_class = false;
    for (size_t comma = rest.find(','); comma != std::string_view::npos;
         comma = rest.find(',', comma + 1)) {
      auto it = class_ids_.find(rest.substr(0, comma));
      if (it == class_ids_.end()) continue;
      known_class = true;
      std::string_view tail = rest.substr(comma + 1);
      size_t c1 = tail.find(',');
      size_t c2 = c1 == std::string_view::npos ? c1 : tail.find(',', c1 + 1);
      if (c2 == std::string_view::npos) continue;
      auto& s = member->spec;
      if (!ParseUint(tail.substr(0, c1), &s.offset)) continue;
      if (!ParseUint(tail.substr(c1 + 1, c2 - c1 - 1), &s.size)) continue;
      if (s.size > std::numeric_limits<uint64_t>::max() - s.offset) {
        return LineError(line.number, "offset {} + size {} overflows", s.offset, s.size);
      }
      s.class_id = it->second.id;
      member->raw_path = tail.substr(c2 + 1);
      if (member->raw_path.empty()) return LineError(line.number, "the member has no path");
      return Ok{};
    }
    if (!known_class) {
      return LineError(line.number, "unknown class '{}'", rest.substr(0, rest.find(',')));
    }
    return LineError(line.number, "expected '<offset>,<size>,<path>' after the class, found '{}'",
                     line.text);
  }

  // Keeps only the candidate dataset roots that this member's path agrees with. A root is
  // the prefix before "<class>/", either empty or ending in '/'.
  Status NarrowRoots(const PendingMember& member) {
    const std::string& cls = spec_.classes[member.spec.class_id];
    std::string_view path = member.raw_path;
    auto is_root_at = [&](size_t pos) {
      return path.size() > pos + cls.size() && path.compare(pos, cls.size(), cls) == 0 &&
             path[pos + cls.size()] == '/' && (pos == 0 || path[pos - 1] == '/');
    };
    if (pending_.empty()) {
      for (size_t pos = 0;;) {
        if (is_root_at(pos)) roots_.emplace_back(path.substr(0, pos));
        const size_t slash = path.find('/', pos);
        if (slash == std::string_view::npos) break;
        pos = slash + 1;
      }
      if (roots_.empty()) {
        return LineError(member.spec.line, "path '{}' has no folder named after its class '{}'",
                         path, cls);
      }
      return Ok{};
    }
    std::vector<std::string> kept;
    for (const std::string& root : roots_) {
      if (path.starts_with(root) && is_root_at(root.size())) kept.push_back(root);
    }
    if (kept.empty()) {
      return LineError(member.spec.line, "path '{}' is not in folder '{}{}/' of the dataset root",
                       path, roots_.front(), cls);
    }
    roots_ = std::move(kept);
    return Ok{};
  }

  Status ResolvePaths() {
    spec_.members.reserve(pending_.size());
    const size_t root_size = roots_.empty() ? 0 : roots_.front().size();  // shortest first
    for (PendingMember& member : pending_) {
      const std::string& cls = spec_.classes[member.spec.class_id];
      auto below = NormalizeRelativePath(member.raw_path.substr(root_size + cls.size() + 1));
      if (!below) {
        return LineError(member.spec.line, "path '{}' is invalid: {}", member.raw_path,
                         below.error().message);
      }
      member.spec.path = cls + '/' + *below;
      spec_.members.push_back(std::move(member.spec));
    }
    return Ok{};
  }

  struct ClassRef {
    uint32_t id;
    uint32_t line;
  };

  LineCursor lines_;
  const std::string& label_;
  DatasetSpec spec_;
  std::unordered_map<std::string_view, ClassRef> class_ids_;
  std::unordered_map<std::string_view, uint32_t> blob_lines_;
  std::vector<PendingMember> pending_;
  std::vector<std::string> roots_;  // candidate dataset roots, shortest first
};

// Checks each blob and widens its group to the whole file: a mytar blob is one group, and
// reading or hashing it whole is what the layout is for.
Status CheckBlob(int dir_fd, const DatasetSpec& spec, GroupSpec& group) {
  const std::filesystem::path blob = spec.dir / group.blob;
  auto stat = StatBeneath(dir_fd, group.blob);
  if (!stat) {
    return Fail(stat.error().code, "cannot open blob {} (declared at {} line {}): {}",
                blob.string(), spec.index_file.string(), group.line, stat.error().message);
  }
  const struct stat& st = *stat;
  if (!S_ISREG(st.st_mode)) {
    return Fail(EINVAL, "cannot use blob {} (declared at {} line {}): not a regular file",
                blob.string(), spec.index_file.string(), group.line);
  }
  if (static_cast<uint64_t>(st.st_size) < group.offset + group.size) {
    return Fail(EINVAL,
                "cannot use blob {} (declared at {} line {}): it is {} bytes but its "
                "members need {}; the blob is truncated",
                blob.string(), spec.index_file.string(), group.line, st.st_size,
                group.offset + group.size);
  }
  group.size = static_cast<uint64_t>(st.st_size);
  return Ok{};
}

Status CheckBlobs(DatasetSpec& spec) {
  const int dir_fd = open(spec.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    return Fail(errno, "cannot open dataset folder {}: {}", spec.dir.string(), strerror(errno));
  }
  Status result = Ok{};
  for (GroupSpec& group : spec.groups) {
    result = CheckBlob(dir_fd, spec, group);
    if (!result) break;
  }
  close(dir_fd);
  return result;
}

}  // namespace

Result<DatasetSpec> ParseMytarIndex(std::string_view text, const std::string& label) {
  return MytarParser(text, label).Run();
}

Result<DatasetSpec> ReadMytarDataset(const std::filesystem::path& dir) {
  const std::filesystem::path index = dir / kMytarIndexName;
  auto text = ReadWholeFile(index);
  if (!text) return text.error();
  auto spec = ParseMytarIndex(*text, index.string());
  if (!spec) return spec.error();
  spec->dir = dir;
  spec->index_file = index;
  if (Status s = CheckBlobs(*spec); !s) return s.error();
  return spec;
}

Result<std::filesystem::path> ResolveMytarDir(const std::filesystem::path& src,
                                              std::optional<uint32_t> group_size) {
  namespace stdfs = std::filesystem;
  std::error_code ec;
  if (!stdfs::is_directory(src, ec)) {
    return Fail(ENOENT, "cannot open dataset {}: {}", src.string(),
                // SRC may name an archive as well as a folder: a missing one is either.
                stdfs::exists(src, ec) ? "not a folder" : "no such file or folder");
  }
  if (stdfs::is_regular_file(src / kMytarIndexName, ec)) return src;
  std::vector<std::string> sizes;
  for (const auto& entry : stdfs::directory_iterator(src, ec)) {
    uint32_t g = 0;
    const std::string name = entry.path().filename().string();
    if (ParseUint(name, &g) && stdfs::is_regular_file(entry.path() / kMytarIndexName, ec)) {
      sizes.push_back(name);
    }
  }
  std::sort(sizes.begin(), sizes.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  const std::string listed = fmt::format("{}", fmt::join(sizes, ", "));
  if (group_size) {
    const std::string wanted = std::to_string(*group_size);
    if (std::find(sizes.begin(), sizes.end(), wanted) != sizes.end()) return src / wanted;
    return Fail(ENOENT, "cannot open dataset {}: no group size {} (found: {})", src.string(),
                wanted, sizes.empty() ? "none" : listed);
  }
  if (sizes.size() == 1) return src / sizes.front();
  if (sizes.empty()) {
    return Fail(ENOENT, "cannot open dataset {}: no {} in it nor in a group-size folder below it",
                src.string(), kMytarIndexName);
  }
  return Fail(EINVAL,
              "cannot open dataset {}: it holds several group sizes ({}); choose one "
              "with --group-size",
              src.string(), listed);
}

}  // namespace gpufs
