#include "cache/cached_bytes.h"

#include <utility>

namespace gpufs {

CachedBytes::CachedBytes(CachedBytes&& other) noexcept { *this = std::move(other); }

CachedBytes& CachedBytes::operator=(CachedBytes&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    holder_ = std::exchange(other.holder_, nullptr);
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

CachedBytes CachedBytes::Pinned(PinHolder* holder, const char* data, size_t size, void* hot,
                                std::shared_ptr<void> entry) {
  CachedBytes pinned;
  pinned.holder_ = holder;
  pinned.data_ = data;
  pinned.size_ = size;
  pinned.hot_ = hot;
  pinned.entry_ = std::move(entry);
  return pinned;
}

CachedBytes::~CachedBytes() { Release(); }

void CachedBytes::Release() {
  if (holder_) holder_->Unpin(hot_, entry_.get());
}

}  // namespace gpufs
