#include "gpu/batch.h"

#include <sys/xattr.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "base/xattr_names.h"

namespace gpufs::gpu {
namespace {

Result<std::string> Attribute(const std::string& path, const char* name) {
  char value[4096];
  const ssize_t n = getxattr(path.c_str(), name, value, sizeof(value));
  if (n < 0) {
    if (errno == ENODATA || errno == ENOTSUP) {
      return Fail(EINVAL,
                  "cannot locate {}: not a file of a gpufs mount, or one decoded from a "
                  "compressed archive, which is read through the mount (no {})",
                  path, name);
    }
    return Fail(errno, "cannot locate {}: {}", path, strerror(errno));
  }
  return std::string(value, static_cast<size_t>(n));
}

Result<uint64_t> Number(const std::string& path, const char* name) {
  auto text = Attribute(path, name);
  if (!text) return text.error();
  uint64_t value = 0;
  const char* end = text->data() + text->size();
  if (std::from_chars(text->data(), end, value).ptr != end) {
    return Fail(EPROTO, "cannot locate {}: {} is '{}'", path, name, *text);
  }
  return value;
}

uint64_t AlignUp(uint64_t value, uint64_t align) {
  return align <= 1 ? value : (value + align - 1) / align * align;
}

}  // namespace

Result<MemberLocation> LocateMember(const std::string& path) {
  MemberLocation m;
  m.path = path;
  auto blob = Attribute(path, xattr::kBlob);
  if (!blob) return blob.error();
  m.blob = std::move(*blob);
  auto offset = Number(path, xattr::kOffset);
  if (!offset) return offset.error();
  auto size = Number(path, xattr::kSize);
  if (!size) return size.error();
  m.offset = *offset;
  m.size = *size;
  return m;
}

BatchPlan PlanBatch(std::vector<MemberLocation> members, const PlanOptions& options) {
  BatchPlan plan;
  plan.members = std::move(members);
  std::map<std::string, size_t> blob_index;
  std::vector<size_t> order(plan.members.size());
  for (size_t i = 0; i < plan.members.size(); ++i) {
    order[i] = i;
    plan.destination.push_back(plan.output_bytes);
    plan.output_bytes = AlignUp(plan.output_bytes + plan.members[i].size, options.align);
    auto [it, added] = blob_index.try_emplace(plan.members[i].blob, plan.blobs.size());
    if (added) plan.blobs.push_back(plan.members[i].blob);
  }
  const auto key = [&](size_t i) {
    return std::pair(blob_index[plan.members[i].blob], plan.members[i].offset);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  for (size_t i : order) {
    const MemberLocation& m = plan.members[i];
    const size_t blob = blob_index[m.blob];
    ReadRun* run = plan.runs.empty() ? nullptr : &plan.runs.back();
    const bool joins =
        run && run->blob == blob && m.offset <= run->offset + run->size + options.max_gap &&
        std::max(run->offset + run->size, m.offset + m.size) - run->offset <= options.max_run;
    if (!joins) {
      plan.runs.push_back(ReadRun{blob, m.offset, 0, {}});
      run = &plan.runs.back();
    }
    run->size = std::max(run->offset + run->size, m.offset + m.size) - run->offset;
    run->members.push_back(i);
  }
  for (const ReadRun& run : plan.runs) plan.read_bytes += run.size;
  return plan;
}

DeviceBatch::DeviceBatch(Stager& stager, void* data, BatchPlan plan)
    : stager_(&stager), data_(data), plan_(std::move(plan)) {}

DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept
    : stager_(other.stager_), data_(other.data_), plan_(std::move(other.plan_)) {
  other.data_ = nullptr;
}

DeviceBatch::~DeviceBatch() {
  if (data_ != nullptr) stager_->FreeDevice(data_);
}

}  // namespace gpufs::gpu
