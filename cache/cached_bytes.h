// The bytes of one read, handed to the reply and released when it is sent: a pinned span
// of a cached group, or bytes read for that reply alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gpufs {

// Who keeps the span of a CachedBytes in place: told once, when the bytes are released.
class PinHolder {
 public:
  // `hot`: the hot slot the span was pinned in; else null, and `entry` the pinned load.
  virtual void Unpin(void* hot, void* entry) = 0;

 protected:
  ~PinHolder() = default;
};

// Held in place (a cached group stays pinned) until destroyed. Move-only.
class CachedBytes {
 public:
  CachedBytes() = default;
  CachedBytes(CachedBytes&& other) noexcept;
  CachedBytes& operator=(CachedBytes&& other) noexcept;
  ~CachedBytes();
  // `size` bytes at `start` of `bytes`, read for one reply alone and owned by the result.
  static CachedBytes Owned(std::unique_ptr<char[]> bytes, size_t start, size_t size);
  // `size` bytes at `data`, held in place by `holder` until destroyed (see PinHolder).
  static CachedBytes Pinned(PinHolder* holder, const char* data, size_t size, void* hot,
                            std::shared_ptr<void> entry = nullptr);
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  void Release();

  PinHolder* holder_ = nullptr;    // set when data_ is a pinned group
  void* hot_ = nullptr;            // the group's hot slot, when pinned there; else entry_
  std::shared_ptr<void> entry_;    // the pinned load: a failed one keeps its room until unpinned
  std::unique_ptr<char[]> owned_;  // set when data_ was read for this reply alone
};

}  // namespace gpufs
