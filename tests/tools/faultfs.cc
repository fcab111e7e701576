// faultfs: a read-only passthrough of one folder that answers EIO where a rules file says,
// so that tests can break a dataset's blobs under a running gpufsd without a device mapper.
//
//     faultfs [-f] [-d] [--rules FILE] [-o OPT] SRC MNT
//
// The rules file is read again whenever it changes (its inode, size, mtime or ctime), so
// rules can be added and removed while mounted; a missing file means no rules. Replace it
// by rename to change it at once: an edit in place that keeps the size within one clock
// tick can go unseen. One rule a line, paths relative to SRC, '#' starts a comment:
//
//     RELPATH START END    a read that overlaps the bytes [START, END) fails with EIO
//     RELPATH open         opening the file fails with EIO
//
// A handle opened with O_DIRECT is direct_io: each of its reads reaches faultfs, so a rule
// holds for it from the next read on, and removing the rule heals it at once. O_DIRECT is
// honoured that way rather than passed to SRC, whose filesystem (tmpfs) may refuse it.
// Other handles go through the kernel's page cache (so that mmap works), which each open
// drops: a rule holds for the pages not cached yet, that is for every page of a file that
// nobody read since it was last opened, and fails whole pages, as the kernel reads them.
// Writes are refused with EROFS.
#define FUSE_USE_VERSION 314
#include <fuse.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace gpufs {
namespace {

struct Rule {
  std::string path;  // relative to SRC
  bool open = false;
  uint64_t start = 0;  // the failing bytes [start, end) when !open
  uint64_t end = 0;
};

// Splits the last word off `line` (trailing blanks dropped); empty when there is none.
std::string PopWord(std::string& line) {
  const size_t last = line.find_last_not_of(" \t\r");
  if (last == std::string::npos) return {};
  line.resize(last + 1);
  const size_t blank = line.find_last_of(" \t");
  const size_t begin = blank == std::string::npos ? 0 : blank + 1;
  std::string word = line.substr(begin);
  line.resize(begin);
  return word;
}

bool ParseOffset(const std::string& word, uint64_t& value) {
  if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return false;
  value = std::strtoull(word.c_str(), nullptr, 10);
  return true;
}

// Parses one rule from the right, so RELPATH may hold spaces; false when malformed.
bool ParseRule(std::string line, Rule& rule) {
  const std::string last = PopWord(line);
  if (last == "open") {
    rule.open = true;
  } else if (!ParseOffset(last, rule.end) || !ParseOffset(PopWord(line), rule.start)) {
    return false;
  }
  const size_t first = line.find_first_not_of(" \t/");
  const size_t end = line.find_last_not_of(" \t");
  if (first == std::string::npos || end == std::string::npos || end < first) return false;
  rule.path = line.substr(first, end - first + 1);
  return true;
}

// The rules in force, re-read from their file when it changes. Thread-safe.
class Rules {
 public:
  explicit Rules(std::string file) : file_(std::move(file)) {}

  // Whether opening `path` (relative to SRC) must fail.
  bool FailsOpen(const std::string& path) {
    std::lock_guard lock(mu_);
    Refresh();
    for (const Rule& rule : rules_) {
      if (rule.open && rule.path == path) return true;
    }
    return false;
  }

  // Whether reading `size` bytes of `path` at `offset` must fail.
  bool FailsRead(const std::string& path, uint64_t offset, uint64_t size) {
    std::lock_guard lock(mu_);
    Refresh();
    for (const Rule& rule : rules_) {
      if (!rule.open && rule.path == path && offset < rule.end && offset + size > rule.start) {
        return true;
      }
    }
    return false;
  }

 private:
  // Re-reads the file when its identity or times changed since the last look.
  void Refresh() {
    if (file_.empty()) return;
    struct stat st {};
    std::string key = "absent";
    if (stat(file_.c_str(), &st) == 0) {
      key = std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
            std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
            std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
    }
    if (key == key_) return;
    key_ = key;
    rules_.clear();
    std::ifstream in(file_);
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Rule rule;
      if (ParseRule(line, rule)) {
        rules_.push_back(rule);
      } else {
        std::fprintf(stderr,
                     "faultfs: cannot parse %s line %d: want RELPATH START END or "
                     "RELPATH open\n",
                     file_.c_str(), number);
      }
    }
  }

  const std::string file_;
  std::mutex mu_;
  std::string key_ = "unread";  // guarded by mu_
  std::vector<Rule> rules_;     // guarded by mu_
};

struct Context {
  int source_fd = -1;  // SRC, opened before mounting; every path is resolved below it
  Rules* rules = nullptr;
};

Context& Ctx() { return *static_cast<Context*>(fuse_get_context()->private_data); }

// FUSE paths start with '/'; the *at calls want them relative to SRC.
std::string Relative(const char* path) { return path[1] == '\0' ? "." : std::string(path + 1); }

void* Init(fuse_conn_info*, fuse_config* config) {
  // Names and attributes are not cached by the kernel: a change of SRC shows at once.
  config->entry_timeout = 0;
  config->attr_timeout = 0;
  config->negative_timeout = 0;
  config->kernel_cache = 0;
  return fuse_get_context()->private_data;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  const int rc = fi != nullptr
                     ? fstat(static_cast<int>(fi->fh), st)
                     : fstatat(Ctx().source_fd, Relative(path).c_str(), st, AT_SYMLINK_NOFOLLOW);
  return rc == 0 ? 0 : -errno;
}

int ReadLink(const char* path, char* buffer, size_t size) {
  const ssize_t n = readlinkat(Ctx().source_fd, Relative(path).c_str(), buffer, size - 1);
  if (n < 0) return -errno;
  buffer[n] = '\0';
  return 0;
}

int ReadDir(const char* path, void* buffer, fuse_fill_dir_t fill, off_t, fuse_file_info*,
            fuse_readdir_flags) {
  const int fd =
      openat(Ctx().source_fd, Relative(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    const int error = errno;
    close(fd);
    return -error;
  }
  while (const dirent* entry = readdir(dir)) {
    struct stat st {};
    st.st_ino = entry->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(entry->d_type));
    if (fill(buffer, entry->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  closedir(dir);
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  const std::string relative = Relative(path);
  if (Ctx().rules->FailsOpen(relative)) return -EIO;
  // O_DIRECT and O_NOATIME are not passed on: direct_io keeps the kernel's page cache out
  // of an O_DIRECT handle, and SRC's filesystem may refuse either flag.
  const int fd = openat(Ctx().source_fd, relative.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  fi->direct_io = (fi->flags & O_DIRECT) != 0;
  fi->keep_cache = 0;
  return 0;
}

int Read(const char* path, char* buffer, size_t size, off_t offset, fuse_file_info* fi) {
  if (Ctx().rules->FailsRead(Relative(path), static_cast<uint64_t>(offset), size)) return -EIO;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(static_cast<int>(fi->fh), buffer + done, size - done,
                            offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<int>(done);
}

int Release(const char*, fuse_file_info* fi) {
  close(static_cast<int>(fi->fh));
  return 0;
}

int StatFs(const char*, struct statvfs* st) {
  return fstatvfs(Ctx().source_fd, st) == 0 ? 0 : -errno;
}

fuse_operations Operations() {
  fuse_operations ops{};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  ops.statfs = StatFs;
  return ops;
}

int Usage() {
  std::fprintf(stderr, "usage: faultfs [-f] [-d] [--rules FILE] [-o OPT] SRC MNT\n");
  return 2;
}

}  // namespace
}  // namespace gpufs

int main(int argc, char** argv) {
  std::vector<std::string> fuse_argv = {argv[0]};
  std::vector<std::string> positional;
  std::string rules_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-f" || arg == "-d") {
      fuse_argv.push_back(arg);
    } else if ((arg == "--rules" || arg == "-o") && i + 1 < argc) {
      if (arg == "-o") fuse_argv.insert(fuse_argv.end(), {"-o", argv[++i]});
      if (arg == "--rules") rules_file = std::filesystem::absolute(argv[++i]).string();
    } else if (!arg.empty() && arg[0] == '-') {
      return gpufs::Usage();
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) return gpufs::Usage();

  gpufs::Rules rules(rules_file);
  gpufs::Context context;
  context.rules = &rules;
  context.source_fd = open(positional[0].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (context.source_fd < 0) {
    std::fprintf(stderr, "faultfs: cannot open %s: %s\n", positional[0].c_str(),
                 std::strerror(errno));
    return 1;
  }
  // Commas would split the option list; SRC is named for mountinfo only.
  std::string name = std::filesystem::absolute(positional[0]).string();
  for (char& c : name) {
    if (c == ',' || c == '\\') c = '_';
  }
  // An explicit max_threads keeps libfuse 3.14 from warning about its own default.
  fuse_argv.insert(fuse_argv.end(),
                   {"-o", "ro,max_threads=16,subtype=faultfs,fsname=" + name, positional[1]});
  std::vector<char*> args;
  for (std::string& arg : fuse_argv) args.push_back(arg.data());
  const fuse_operations ops = gpufs::Operations();
  const int rc = fuse_main(static_cast<int>(args.size()), args.data(), &ops, &context);
  close(context.source_fd);
  return rc;
}
