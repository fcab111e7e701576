#include "fuse/fuse_ops.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

namespace gpufs {
namespace {

FuseContext& Ctx(fuse_req_t req) { return *static_cast<FuseContext*>(fuse_req_userdata(req)); }

// At most kLinesPerSecond lines a second: a failing blob read by 40 readers at once logs
// its cause, not 40 copies of it, and a storm of errors cannot fill the disk the log is
// on. What was held back is counted on the next line let through.
class ErrorLines {
 public:
  static constexpr unsigned kLinesPerSecond = 10;

  // Whether a line may be logged now; `held_back` gets the lines not logged before it.
  bool Allow(uint64_t& held_back) {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_ >= std::chrono::seconds(1)) {
      window_ = now;
      logged_ = 0;
    }
    if (logged_ >= kLinesPerSecond) {
      ++held_back_;
      return false;
    }
    ++logged_;
    held_back = std::exchange(held_back_, 0);
    return true;
  }

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_;  // guarded by mu_
  unsigned logged_ = 0;                           // guarded by mu_: in this window
  uint64_t held_back_ = 0;                        // guarded by mu_
};

// The one place a failure becomes a reply: expected misses stay quiet, the rest are logged.
void ReplyError(fuse_req_t req, const Error& error) {
  static ErrorLines lines;
  uint64_t held_back = 0;
  if (error.code != ENOENT && error.code != ENODATA && error.code != ENOSYS &&
      lines.Allow(held_back)) {
    if (held_back == 0) {
      spdlog::warn("{}", error.message);
    } else {
      spdlog::warn("{} ({} more error lines were held back)", error.message, held_back);
    }
  }
  fuse_reply_err(req, error.code);
}

// No exception may unwind into libfuse's C frames: a failure to allocate while building a
// reply becomes EIO for that request. Bodies reply last, so nothing has been sent yet.
template <typename Body>
void Guarded(fuse_req_t req, Body&& body) noexcept {
  try {
    body();
  } catch (const std::exception& e) {
    spdlog::error("cannot answer a request: {}", e.what());
    fuse_reply_err(req, EIO);
  }
}

fuse_entry_param EntryParam(const FuseContext& ctx, uint64_t ino, const struct stat& attr) {
  fuse_entry_param e{};
  e.ino = ino;
  e.attr = attr;
  e.attr_timeout = ctx.cache.attr_timeout_s;
  e.entry_timeout = ctx.cache.entry_timeout_s;
  return e;
}

void Init(void* userdata, fuse_conn_info* conn) {
  auto& ctx = *static_cast<FuseContext*>(userdata);
  auto want = [conn](bool on, unsigned cap) {
    if (on && (conn->capable & cap)) {
      conn->want |= cap;
    } else {
      conn->want &= ~cap;
    }
  };
  const CachePolicy& cache = ctx.cache;
  want(cache.no_open && !cache.direct_io, FUSE_CAP_NO_OPEN_SUPPORT);
  want(cache.no_open, FUSE_CAP_NO_OPENDIR_SUPPORT);
  want(cache.readdirplus != DirPlus::kNever, FUSE_CAP_READDIRPLUS);
  want(cache.readdirplus == DirPlus::kAuto, FUSE_CAP_READDIRPLUS_AUTO);
  want(true, FUSE_CAP_PARALLEL_DIROPS);
  want(true, FUSE_CAP_ASYNC_READ);
  // Buffered reads reach the daemon as read-ahead, in the background: the kernel's default
  // of 12 at once would cap every reader of the mount together.
  if (cache.max_background > 0) {
    conn->max_background = cache.max_background;
    conn->congestion_threshold = cache.congestion_threshold;
  }
  if (!ctx.on_init) return;
  try {
    ctx.on_init();
  } catch (const std::exception& e) {
    spdlog::error("cannot finish start-up: {}", e.what());
  }
}

void LookupBody(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto& ctx = Ctx(req);
  auto entry = ctx.fs->Lookup(parent, name);
  if (!entry) {
    if (entry.error().code == ENOENT) {
      // A negative entry: the tree never changes, so "no such name" can be cached too.
      fuse_entry_param none = EntryParam(ctx, 0, {});
      fuse_reply_entry(req, &none);
      return;
    }
    ReplyError(req, entry.error());
    return;
  }
  ctx.fs->Remember(entry->ino);
  fuse_entry_param e = EntryParam(ctx, entry->ino, entry->attr);
  fuse_reply_entry(req, &e);
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guarded(req, [&] { LookupBody(req, parent, name); });
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Ctx(req).fs->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Ctx(req).fs->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  Guarded(req, [&] {
    auto& ctx = Ctx(req);
    auto attr = ctx.fs->GetAttr(ino);
    if (!attr) return ReplyError(req, attr.error());
    fuse_reply_attr(req, &*attr, ctx.cache.attr_timeout_s);
  });
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, [&] {
    auto& ctx = Ctx(req);
    if (Status s = ctx.fs->Open(ino, fi->flags); !s) return ReplyError(req, s.error());
    if (ctx.cache.no_open && !ctx.cache.direct_io) {
      return (void)fuse_reply_err(req, ENOSYS);  // never asked again
    }
    fi->direct_io = ctx.cache.direct_io;
    fi->keep_cache = ctx.cache.keep_cache && !ctx.cache.direct_io;
    fi->noflush = 1;
    fuse_reply_open(req, fi);
  });
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, [&] {
    auto& ctx = Ctx(req);
    if (Status s = ctx.fs->OpenDir(ino); !s) return ReplyError(req, s.error());
    if (ctx.cache.no_open) return (void)fuse_reply_err(req, ENOSYS);
    fi->keep_cache = ctx.cache.keep_cache;
    fi->cache_readdir = ctx.cache.keep_cache;
    fuse_reply_open(req, fi);
  });
}

// The first reply of a listing in auto mode: a page, as older kernels asked for. Newer ones
// ask for more than a page, and each entry of a plus reply makes a kernel inode and dentry:
// filling the whole buffer made one for the first 180 or so files of every folder of a
// plain walk, which at 14 M files doubled its time, nearly all of it in the kernel
// (BENCHMARKS.md, 14.0 M files). A listing whose files are looked up turns the rest of it
// plus, in full replies.
constexpr size_t kFirstPlusReply = 4096;

// Fills one reply buffer of at most `size` bytes with entries from `offset` on.
void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, bool plus) {
  auto& ctx = Ctx(req);
  if (plus && offset == 0 && ctx.cache.readdirplus == DirPlus::kAuto) {
    size = std::min(size, kFirstPlusReply);
  }
  std::vector<char> buffer(size);
  size_t used = 0;
  std::string name;
  Status s = ctx.fs->ReadDir(ino, static_cast<uint64_t>(offset), [&](const DirEntry& entry) {
    name.assign(entry.name);  // the fuse helpers want a NUL-terminated name
    const off_t next = static_cast<off_t>(entry.next_offset);
    size_t need;
    if (plus) {
      fuse_entry_param e = EntryParam(ctx, entry.attr.st_ino, entry.attr);
      need = fuse_add_direntry_plus(req, buffer.data() + used, size - used, name.c_str(), &e, next);
    } else {
      need = fuse_add_direntry(req, buffer.data() + used, size - used, name.c_str(), &entry.attr,
                               next);
    }
    if (need > size - used) return false;
    used += need;
    // The kernel takes a reference to each entry but the dot ones.
    if (plus && name != "." && name != "..") ctx.fs->Remember(entry.attr.st_ino);
    return true;
  });
  if (!s) return ReplyError(req, s.error());
  fuse_reply_buf(req, buffer.data(), used);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  Guarded(req, [&] { ReadDirCommon(req, ino, size, off, false); });
}

void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  Guarded(req, [&] { ReadDirCommon(req, ino, size, off, true); });
}

void ReadBody(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset) {
  auto& ctx = Ctx(req);
  auto fetched = ctx.fs->Fetch(ino, static_cast<uint64_t>(offset), size);
  if (!fetched) return ReplyError(req, fetched.error());
  // The kernel copies straight out of the pinned group (or the bytes read for this reply);
  // the pin ends with `fetched`.
  fuse_reply_buf(req, fetched->data(), fetched->size());
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* /*fi*/) {
  Guarded(req, [&] { ReadBody(req, ino, size, offset); });
}

void ReplyXattr(fuse_req_t req, const Result<std::string>& value, size_t size) {
  if (!value) return ReplyError(req, value.error());
  if (size == 0) return (void)fuse_reply_xattr(req, value->size());
  if (size < value->size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, value->data(), value->size());
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Guarded(req, [&] { ReplyXattr(req, Ctx(req).fs->GetXattr(ino, name), size); });
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Guarded(req, [&] { ReplyXattr(req, Ctx(req).fs->ListXattr(ino), size); });
}

void StatFs(fuse_req_t req, fuse_ino_t /*ino*/) {
  const struct statvfs st = Ctx(req).fs->StatFs();
  fuse_reply_statfs(req, &st);
}

void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, ENOSYS); }
void Release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

// Every modifying operation: the mount is read-only whatever the mount flags say.
void Rofs(fuse_req_t req) { fuse_reply_err(req, EROFS); }
void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { Rofs(req); }
void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { Rofs(req); }
void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { Rofs(req); }
void Unlink(fuse_req_t req, fuse_ino_t, const char*) { Rofs(req); }
void SymLink(fuse_req_t req, const char*, fuse_ino_t, const char*) { Rofs(req); }
void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  Rofs(req);
}
void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { Rofs(req); }
void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) { Rofs(req); }
void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { Rofs(req); }
void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { Rofs(req); }
void RemoveXattr(fuse_req_t req, fuse_ino_t, const char*) { Rofs(req); }
void Fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { Rofs(req); }

fuse_lowlevel_ops MakeOperations() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = GetAttr;
  ops.open = Open;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.readdirplus = ReadDirPlus;
  ops.read = Read;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.statfs = StatFs;
  ops.flush = Flush;
  ops.release = Release;
  ops.releasedir = Release;
  ops.setattr = SetAttr;
  ops.mknod = MkNod;
  ops.mkdir = MkDir;
  ops.unlink = Unlink;
  ops.rmdir = Unlink;
  ops.symlink = SymLink;
  ops.rename = Rename;
  ops.link = Link;
  ops.write = Write;
  ops.create = Create;
  ops.setxattr = SetXattr;
  ops.removexattr = RemoveXattr;
  ops.fallocate = Fallocate;
  return ops;
}

}  // namespace

std::optional<DirPlus> ParseDirPlus(std::string_view name) {
  for (size_t i = 0; i < kDirPlusNames.size(); ++i) {
    if (kDirPlusNames[i] == name) return static_cast<DirPlus>(i);
  }
  return std::nullopt;
}

const fuse_lowlevel_ops& FuseOperations() {
  static const fuse_lowlevel_ops ops = MakeOperations();
  return ops;
}

}  // namespace gpufs
