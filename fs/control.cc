#include "fs/control.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "cache/cache_stat.h"
#include "dataset/open/open_dataset.h"
#include "fs/problem_log.h"
#include "fs/residency.h"
#include "source/cgroup_limits.h"

namespace gpufs {
namespace {

// How many of the daemon's last warnings and errors a reply carries.
constexpr size_t kProblemsShown = 8;

void ReplyError(const ReplySink& reply, std::string_view message) {
  reply(nlohmann::json{{"error", message}}.dump() + "\n");
}

nlohmann::json CountJson(const PageCount& count) {
  return {{"resident_pages", count.resident}, {"total_pages", count.total}};
}

Result<ResidencyQuery> ParseQuery(const nlohmann::json& request) {
  ResidencyQuery query;
  query.path = request.value("path", "");
  const std::string list = request.value("list", "none");
  const std::string by = request.value("by", "none");
  if (list == "kernel") {
    query.list = ListFiles::kKernelKnown;
  } else if (list == "all") {
    query.list = ListFiles::kAll;
  } else if (list != "none") {
    return Fail(EINVAL, "unknown list '{}': use none, kernel or all", list);
  }
  if (by == "class") {
    query.by = GroupBy::kClass;
  } else if (by == "group") {
    query.by = GroupBy::kGroup;
  } else if (by != "none") {
    return Fail(EINVAL, "unknown by '{}': use none, class or group", by);
  }
  return query;
}

void ReplyResidency(const Filesystem& fs, const nlohmann::json& request, const ReplySink& reply) {
  auto query = ParseQuery(request);
  if (!query) return ReplyError(reply, query.error().message);
  // File lines are buffered and sent in large pieces; the header must come first, so the
  // lines wait in memory (about 60 bytes a file) until the walk has the totals.
  std::string lines;
  auto report = Residency(fs, *query, [&lines](const FileResidency& f) {
    fmt::format_to(std::back_inserter(lines), "{}{}{} {} {} {} {}\n", f.pinned ? 'p' : '-',
                   f.kernel_known ? 'k' : '-', f.on_disk ? 'd' : '-', f.size, f.group, f.class_id,
                   f.path);
  });
  if (!report) return ReplyError(reply, report.error().message);
  nlohmann::json header{{"files", report->files},
                        {"dirs", report->dirs},
                        {"page_size", kStatPageSize},
                        {"pinned", CountJson(report->pinned)},
                        {"classes", fs.catalog().classes()}};
  if (report->has_disk) header["disk"] = CountJson(report->disk);
  nlohmann::json buckets = nlohmann::json::array();
  for (const ResidencyBucket& b : report->buckets) {
    buckets.push_back({{"id", b.id}, {"files", b.files}, {"pinned", CountJson(b.pinned)}});
    if (report->has_disk) buckets.back()["disk"] = CountJson(b.disk);
  }
  header["buckets"] = std::move(buckets);
  header["problems"] = RecentProblems(kProblemsShown);
  if (const GroupCache* cache = fs.cache()) {
    const nlohmann::json stats = cache->Stats();
    header["memory"] = {{"budget_bytes", stats[cache_stat::kBudget]},
                        {"taken_bytes", stats[cache_stat::kArenaTaken]}};
  }
  // A class name that is not UTF-8 cannot be JSON: its bytes are replaced, not refused.
  reply(header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  constexpr size_t kPiece = 1 << 20;
  for (size_t at = 0; at < lines.size(); at += kPiece) {
    reply(std::string_view(lines).substr(at, kPiece));
  }
}

}  // namespace

nlohmann::json StatsOf(const Filesystem& fs) {
  using namespace fs_stat;
  const Catalog& catalog = fs.catalog();
  const auto& served = fs.served();
  nlohmann::json j{{kPid, getpid()},
                   {kSource, fs.options().source},
                   {kFormat, fs.options().format},
                   {kFiles, catalog.file_count()},
                   {kDirs, catalog.dir_count()},
                   {kBytes, catalog.total_bytes()},
                   {kGroups, catalog.group_count()},
                   {kInodes, fs.references()},
                   {kServed,
                    {{kReads, served.reads.load()},
                     {kBytes, served.bytes.load()},
                     {kFiles, served.files.load()}}}};
  j[kCache] = fs.cache() ? fs.cache()->Stats() : nlohmann::json();
  j[kIo] = fs.source().Stats();
  j[kKernel] = fs.KernelStats();
  j[kProblems] = RecentProblems(kProblemsShown);
  const GpuInfo& gpu = fs.options().gpu;
  j[kGpu] = {{"device", gpu.device},
             {"registered", gpu.registered},
             {"registered_bytes", gpu.bytes},
             {"register_ms", gpu.register_ms}};
  return j;
}

// What a disk tier in the default folder (the cache folder, where remote sources keep
// theirs) could take: its disk's free space less what a tier leaves free. The folder may
// not exist yet: its nearest existing parent is on the same disk.
uint64_t DiskAvailable() {
  std::filesystem::path dir = DefaultCacheDir();
  std::error_code ec;
  while (!std::filesystem::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path()) {
    dir = dir.parent_path();
  }
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) return 0;
  const uint64_t free = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  return free - std::min(free, DiskTier::DefaultKeepFree(uint64_t{vfs.f_blocks} * vfs.f_frsize));
}

void ReplyAdvice(const Filesystem& fs, const ReplySink& reply) {
  const GroupCache* cache = fs.cache();
  if (!cache) {
    return ReplyError(reply, "cannot advise: the mount has no cache (--cache-size 0)");
  }
  reply(cache->Advise(MemoryAvailable(), DiskAvailable()).dump() + "\n");
}

void HandleControlRequest(const Filesystem& fs, std::string_view request, const ReplySink& reply) {
  const nlohmann::json parsed = nlohmann::json::parse(request, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return ReplyError(reply, "cannot read the request: not a JSON object");
  }
  try {
    const std::string op = parsed.value("op", "");
    if (op == "stats") return reply(StatsOf(fs).dump() + "\n");
    if (op == "residency") return ReplyResidency(fs, parsed, reply);
    if (op == "advise") return ReplyAdvice(fs, reply);
    ReplyError(reply, fmt::format("unknown op '{}': use stats, residency or advise", op));
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    ReplyError(reply, fmt::format("cannot read the request: {}", e.what()));
  }
}

}  // namespace gpufs
