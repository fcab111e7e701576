#include "fs/residency.h"

#include <map>

namespace gpufs {
namespace {

class Walk {
 public:
  Walk(const Filesystem& fs, const ResidencyQuery& query,
       const std::function<void(const FileResidency&)>& list)
      : fs_(fs), catalog_(fs.catalog()), query_(query), list_(list) {
    if (fs.cache()) resident_ = fs.cache()->ResidentGroups();
    if (fs.cache() && fs.cache()->has_tier()) {
      on_disk_ = fs.cache()->TierGroups();
      report_.has_disk = true;
    }
  }

  // Depth first, children in their (sorted) catalog order; `path_` holds the node's path.
  void Visit(NodeId id) {
    if (catalog_.IsDir(id)) {
      ++report_.dirs;
      const size_t length = path_.size();
      for (uint32_t k = 0; k < catalog_.ChildCount(id); ++k) {
        const NodeId child = catalog_.ChildAt(id, k);
        if (!path_.empty()) path_ += '/';
        catalog_.ChildName(id, child).AppendTo(path_);
        Visit(child);
        path_.resize(length);
      }
      return;
    }
    VisitFile(id);
  }

  ResidencyReport Finish() {
    for (const auto& [id, bucket] : buckets_) report_.buckets.push_back(bucket);
    return std::move(report_);
  }

  std::string path_;

 private:
  void VisitFile(NodeId id) {
    const FileExtent& extent = catalog_.Extent(id);
    const uint32_t class_id = catalog_.ClassAt(catalog_.FileIndex(id));
    FileResidency file{path_,          extent.size,    extent.group,       class_id,
                       Pinned(extent), OnDisk(extent), fs_.KernelKnows(id)};
    const uint64_t pages = PagesOf(extent.size);
    ++report_.files;
    Add(report_.pinned, pages, file.pinned);
    Add(report_.disk, pages, file.on_disk);
    if (query_.by != GroupBy::kNone) {
      const uint32_t key = query_.by == GroupBy::kClass ? class_id : extent.group;
      ResidencyBucket& bucket = buckets_[key];
      bucket.id = key;
      ++bucket.files;
      Add(bucket.pinned, pages, file.pinned);
      Add(bucket.disk, pages, file.on_disk);
    }
    if (query_.list == ListFiles::kAll ||
        (query_.list == ListFiles::kKernelKnown && file.kernel_known)) {
      list_(file);
    }
  }

  bool Pinned(const FileExtent& extent) const {
    return extent.group < resident_.size() && resident_[extent.group];
  }

  bool OnDisk(const FileExtent& extent) const {
    return extent.group < on_disk_.size() && on_disk_[extent.group];
  }

  static void Add(PageCount& count, uint64_t pages, bool resident) {
    count.total += pages;
    if (resident) count.resident += pages;
  }

  const Filesystem& fs_;
  const Catalog& catalog_;
  const ResidencyQuery& query_;
  const std::function<void(const FileResidency&)>& list_;
  std::vector<bool> resident_;
  std::vector<bool> on_disk_;
  ResidencyReport report_;
  std::map<uint32_t, ResidencyBucket> buckets_;
};

}  // namespace

Result<ResidencyReport> Residency(const Filesystem& fs, const ResidencyQuery& query,
                                  const std::function<void(const FileResidency&)>& list) {
  std::string_view path = query.path;
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const auto start =
      path.empty() ? std::optional<NodeId>(Catalog::kRoot) : fs.catalog().FindPath(path);
  if (!start) return Fail(ENOENT, "no {} in the mount", query.path);
  Walk walk(fs, query, list);
  walk.path_ = std::string(path);
  walk.Visit(*start);
  return walk.Finish();
}

}  // namespace gpufs
