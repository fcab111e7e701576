// The fuzzer's input as a file: an anonymous memory file (memfd) opened by path through
// /proc/self/fd, so parsers that take a path read the input exactly as they read a file on
// disk, with nothing written to the disk and nothing left behind.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace gpufs::fuzz {

class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("cannot create a memfd");
      std::abort();
    }
    // A memfd is made 0777; readers that refuse a file others may write (the AWS files)
    // would refuse every input.
    if (fchmod(fd_, 0600) != 0) Die("chmod");
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the contents with `size` bytes at `data`.
  void Assign(const void* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) Die("truncate");
    const auto* bytes = static_cast<const char*>(data);
    for (size_t done = 0; done < size;) {
      const ssize_t n = pwrite(fd_, bytes + done, size - done, static_cast<off_t>(done));
      if (n <= 0) Die("write");
      done += static_cast<size_t>(n);
    }
  }

  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  [[noreturn]] static void Die(const char* what) {
    std::fprintf(stderr, "cannot %s the memfd\n", what);
    std::abort();
  }

  int fd_;
};

}  // namespace gpufs::fuzz
