#include "cache/cached_bytes.h"

#include <utility>

#include "cache/group_cache.h"

namespace gpufs {

CachedBytes::CachedBytes(CachedBytes&& other) noexcept { *this = std::move(other); }

CachedBytes& CachedBytes::operator=(CachedBytes&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    cache_ = std::exchange(other.cache_, nullptr);
    hot_ = std::exchange(other.hot_, nullptr);
    entry_ = std::move(other.entry_);
    owned_ = std::move(other.owned_);
  }
  return *this;
}

CachedBytes CachedBytes::Owned(std::unique_ptr<char[]> bytes, size_t start, size_t size) {
  CachedBytes owned;
  owned.owned_ = std::move(bytes);
  owned.data_ = owned.owned_.get() + start;
  owned.size_ = size;
  return owned;
}

CachedBytes::~CachedBytes() { Release(); }

void CachedBytes::Release() {
  if (!cache_) return;
  if (hot_) {
    cache_->UnpinHot(hot_);
  } else {
    cache_->Unpin(entry_.get());
  }
}

}  // namespace gpufs
