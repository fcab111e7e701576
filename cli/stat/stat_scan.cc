#include "cli/stat/stat_scan.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "cli/stat/stat_source.h"
#include "fs/page_cache.h"

namespace gpufs {
namespace {

namespace stdfs = std::filesystem;
constexpr size_t kNone = SIZE_MAX;
constexpr size_t kMostNotes = 5;

// A file whose kernel tier is still to be measured, and where its figures go.
struct KernelJob {
  std::string path;
  size_t listed = kNone;  // index into StatReport::listed
  size_t bucket = kNone;  // index into the bucket table
  KernelPages pages;
  std::string error;
};

class Scanner {
 public:
  Scanner(const StatOptions& options, size_t tiers) : options_(options) {
    for (size_t t = 0; t < tiers; ++t) report_.tiers.push_back(kTierNames[t].label);
    report_.resident.assign(tiers, 0);
  }

  Status AddGpufs(const MountPoint& mount, const stdfs::path& path);
  Status AddPlain(const stdfs::path& path);
  StatReport Finish();

 private:
  size_t Listed(std::string path, uint64_t pages);
  // The bucket of class or group `id` of `mount`, made on first use.
  size_t Bucket(const std::string& mount, uint32_t id, const std::vector<std::string>& classes);
  Status AddDaemonLines(const std::string& mount, std::string_view lines,
                        const std::vector<std::string>& classes);
  void MeasureKernel();
  void Note(std::string note) {
    if (report_.notes.size() < kMostNotes) report_.notes.push_back(std::move(note));
  }

  // Leaves out the disk tier when no daemon asked has one.
  void DropDiskTierUnlessSeen();

  const StatOptions& options_;
  bool saw_disk_ = false;  // a daemon reported a disk tier
  StatReport report_;
  std::vector<KernelJob> jobs_;
  std::map<std::pair<std::string, uint32_t>, size_t> bucket_index_;
  std::map<std::string, DaemonClient> clients_;  // by mount point
};

size_t Scanner::Listed(std::string path, uint64_t pages) {
  if (!options_.verbose) return kNone;
  FileStat file;
  file.path = std::move(path);
  file.pages = pages;
  file.resident.assign(report_.tiers.size(), 0);
  file.charts.assign(report_.tiers.size(), std::vector<bool>(pages, false));
  report_.listed.push_back(std::move(file));
  return report_.listed.size() - 1;
}

size_t Scanner::Bucket(const std::string& mount, uint32_t id,
                       const std::vector<std::string>& classes) {
  auto [it, added] = bucket_index_.try_emplace({mount, id}, report_.buckets.size());
  if (added) {
    BucketStat bucket;
    bucket.name =
        options_.by == GroupBy::kClass && id < classes.size() ? classes[id] : std::to_string(id);
    bucket.resident.assign(report_.tiers.size(), 0);
    report_.buckets.push_back(std::move(bucket));
  }
  return it->second;
}

Status Scanner::AddGpufs(const MountPoint& mount, const stdfs::path& path) {
  auto client = clients_.find(mount.path);
  const bool fresh = client == clients_.end();  // its problems are told once
  if (fresh) {
    auto connected = DaemonClient::Connect(mount, options_.timeout_s);
    if (!connected) return connected.error();
    client = clients_.emplace(mount.path, std::move(*connected)).first;
  }
  const std::string relative = stdfs::path(path).lexically_relative(mount.path).string();
  const char* by = options_.by == GroupBy::kClass   ? "class"
                   : options_.by == GroupBy::kGroup ? "group"
                                                    : "none";
  auto reply = client->second.Ask({{"op", "residency"},
                                   {"path", relative == "." ? "" : relative},
                                   {"list", options_.verbose ? "all" : "kernel"},
                                   {"by", by}});
  if (!reply) return reply.error();
  const size_t eol = reply->find('\n');
  auto header = nlohmann::json::parse(reply->substr(0, eol), nullptr, false);
  if (header.is_discarded() || eol == std::string::npos) {
    return Fail(EPROTO, "the gpufsd of {} sent a bad reply", mount.path);
  }
  if (header.contains("error")) {
    return Fail(ENOENT, "cannot measure {}: {}", path.string(), header["error"].get<std::string>());
  }
  if (fresh) {
    if (header.contains("memory")) {
      Note(
          fmt::format("{}: pinned memory: {:.1f} MiB taken of a {:.1f} MiB budget, as the "
                      "cache fills",
                      mount.path, header["memory"]["taken_bytes"].get<uint64_t>() / 1048576.0,
                      header["memory"]["budget_bytes"].get<uint64_t>() / 1048576.0));
    }
    for (const auto& line : header.value("problems", nlohmann::json::array())) {
      Note(fmt::format("{}: the daemon logged: {}", mount.path, line.get<std::string>()));
    }
  }
  report_.files += header["files"].get<uint64_t>();
  report_.dirs += header["dirs"].get<uint64_t>();
  report_.pages += header["pinned"]["total_pages"].get<uint64_t>();
  report_.resident[kPinnedTier] += header["pinned"]["resident_pages"].get<uint64_t>();
  if (header.contains("disk") && report_.tiers.size() > kDiskTier) {
    saw_disk_ = true;
    report_.resident[kDiskTier] += header["disk"]["resident_pages"].get<uint64_t>();
  }
  const auto classes = header["classes"].get<std::vector<std::string>>();
  for (const auto& b : header["buckets"]) {
    BucketStat& bucket = report_.buckets[Bucket(mount.path, b["id"].get<uint32_t>(), classes)];
    bucket.files += b["files"].get<uint64_t>();
    bucket.pages += b["pinned"]["total_pages"].get<uint64_t>();
    bucket.resident[kPinnedTier] += b["pinned"]["resident_pages"].get<uint64_t>();
    if (b.contains("disk") && report_.tiers.size() > kDiskTier) {
      bucket.resident[kDiskTier] += b["disk"]["resident_pages"].get<uint64_t>();
    }
  }
  return AddDaemonLines(mount.path, std::string_view(*reply).substr(eol + 1), classes);
}

// "<p|-><k|-><d|-> <size> <group> <class id> <path>" per file (fs/control.h).
Status Scanner::AddDaemonLines(const std::string& mount, std::string_view lines,
                               const std::vector<std::string>& classes) {
  while (!lines.empty()) {
    const size_t eol = lines.find('\n');
    const std::string line(lines.substr(0, eol));
    lines.remove_prefix(eol == std::string_view::npos ? lines.size() : eol + 1);
    std::istringstream fields(line);
    std::string flags, relative;
    uint64_t size = 0;
    uint32_t group = 0, class_id = 0;
    fields >> flags >> size >> group >> class_id;
    fields.get();
    std::getline(fields, relative);
    if (!fields && !fields.eof()) return Fail(EPROTO, "the gpufsd of {} sent a bad line", mount);
    const std::string path = mount + "/" + relative;
    const uint64_t pages = PagesOf(size);
    const size_t listed = Listed(path, pages);
    if (listed != kNone && flags[0] == 'p') {
      report_.listed[listed].resident[kPinnedTier] = pages;
      report_.listed[listed].charts[kPinnedTier].assign(pages, true);
    }
    if (listed != kNone && flags.size() > 2 && flags[2] == 'd' &&
        report_.tiers.size() > kDiskTier) {
      report_.listed[listed].resident[kDiskTier] = pages;
      report_.listed[listed].charts[kDiskTier].assign(pages, true);
    }
    if (flags[1] != 'k') continue;  // no inode in the kernel: nothing cached there
    size_t bucket = kNone;
    if (options_.by != GroupBy::kNone) {
      bucket = Bucket(mount, options_.by == GroupBy::kClass ? class_id : group, classes);
    }
    jobs_.push_back(KernelJob{path, listed, bucket, {}, {}});
  }
  return Ok{};
}

Status Scanner::AddPlain(const stdfs::path& path) {
  std::error_code ec;
  const auto add_file = [this](const stdfs::path& file, uint64_t size) {
    ++report_.files;
    report_.pages += PagesOf(size);
    jobs_.push_back(KernelJob{file.string(), Listed(file.string(), PagesOf(size)), kNone, {}, {}});
  };
  const auto status = stdfs::symlink_status(path, ec);
  if (ec) return Fail(ec.value(), "cannot stat {}: {}", path.string(), ec.message());
  if (stdfs::is_regular_file(status)) {
    add_file(path, stdfs::file_size(path, ec));
    return Ok{};
  }
  if (!stdfs::is_directory(status)) return Ok{};
  ++report_.dirs;
  for (auto it = stdfs::recursive_directory_iterator(
           path, stdfs::directory_options::skip_permission_denied, ec);
       !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
    const auto entry_status = it->symlink_status(ec);
    if (ec) break;
    if (stdfs::is_directory(entry_status)) ++report_.dirs;
    if (stdfs::is_regular_file(entry_status)) add_file(it->path(), it->file_size(ec));
  }
  if (ec) return Fail(ec.value(), "cannot walk {}: {}", path.string(), ec.message());
  return Ok{};
}

void Scanner::MeasureKernel() {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs_.size();) {
      auto pages = KernelPagesOf(jobs_[i].path, options_.verbose);
      if (pages) {
        jobs_[i].pages = std::move(*pages);
      } else {
        jobs_[i].error = pages.error().message;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t count = std::min<size_t>(options_.threads, jobs_.size() / 256 + 1);
  for (size_t t = 1; t < count; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

void Scanner::DropDiskTierUnlessSeen() {
  if (saw_disk_ || report_.tiers.size() <= kDiskTier) return;
  report_.tiers.resize(kDiskTier);
  report_.resident.resize(kDiskTier);
  for (BucketStat& b : report_.buckets) b.resident.resize(kDiskTier);
  for (FileStat& f : report_.listed) {
    f.resident.resize(kDiskTier);
    f.charts.resize(kDiskTier);
  }
}

StatReport Scanner::Finish() {
  DropDiskTierUnlessSeen();
  MeasureKernel();
  for (KernelJob& job : jobs_) {
    if (!job.error.empty()) {
      Note(job.error);
      continue;
    }
    report_.resident[kKernelTier] += job.pages.resident;
    if (job.bucket != kNone) {
      report_.buckets[job.bucket].resident[kKernelTier] += job.pages.resident;
    }
    if (job.listed != kNone) {
      FileStat& file = report_.listed[job.listed];
      file.resident[kKernelTier] = job.pages.resident;
      if (!job.pages.pages.empty()) file.charts[kKernelTier] = std::move(job.pages.pages);
    }
  }
  return std::move(report_);
}

}  // namespace

Result<StatReport> Measure(const std::vector<std::string>& paths, const StatOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::pair<stdfs::path, MountPoint>> targets;
  bool any_gpufs = false;
  for (const std::string& given : paths) {
    stdfs::path path = stdfs::absolute(given).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "dir/" names dir
    // The mount table first: a path on a gpufs mount is asked of its daemon, with a time
    // limit, rather than stat'ed, which would wait for a stopped daemon forever.
    auto mount = MountOf(path);
    if (!mount) return mount.error();
    std::error_code ec;
    if (!mount->is_gpufs()) {  // the path may lead into a mount through symbolic links
      if (auto real = stdfs::weakly_canonical(path, ec); !ec && real != path) {
        path = real;
        mount = MountOf(path);
        if (!mount) return mount.error();
      }
    }
    struct stat st {};
    if (!mount->is_gpufs() && lstat(path.c_str(), &st) != 0) {
      return Fail(errno, "cannot stat {}: {}", given, strerror(errno));
    }
    any_gpufs = any_gpufs || mount->is_gpufs();
    targets.emplace_back(path, *mount);
  }
  Scanner scanner(options, any_gpufs ? std::size(kTierNames) : 1);
  std::vector<std::string> plain;
  for (const auto& [path, mount] : targets) {
    Status s = mount.is_gpufs() ? scanner.AddGpufs(mount, path) : scanner.AddPlain(path);
    if (!s) return s.error();
    if (!mount.is_gpufs()) plain.push_back(path.string());
  }
  StatReport report = scanner.Finish();
  for (const std::string& p : plain) {
    report.notes.insert(report.notes.begin(),
                        fmt::format("{} is not on a gpufs mount: kernel page cache only", p));
  }
  if (options.by != GroupBy::kNone && !any_gpufs) {
    report.notes.push_back("--by needs a gpufs mount; showing the total only");
  }
  report.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

Result<double> KernelShare(const std::string& path, const StatOptions& options) {
  auto report = Measure({path}, options);
  if (!report) return report.error();
  if (report->pages == 0) return 0.0;
  return static_cast<double>(report->resident[kKernelTier]) / static_cast<double>(report->pages);
}

}  // namespace gpufs
