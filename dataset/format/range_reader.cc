#include "dataset/format/range_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace gpufs {
namespace {

class FileReader : public RangeReader {
 public:
  FileReader(int fd, uint64_t size, std::string label)
      : fd_(fd), size_(size), label_(std::move(label)) {}
  ~FileReader() override { close(fd_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  uint64_t size() const override { return size_; }
  const std::string& label() const override { return label_; }

  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) override {
    size_t done = 0;
    while (done < length) {
      const ssize_t n = pread(fd_, out + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Fail(errno, "cannot read {}: {}", label_, strerror(errno));
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

 private:
  int fd_;
  uint64_t size_;
  std::string label_;
};

}  // namespace

Result<std::unique_ptr<RangeReader>> OpenFileReader(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(errno, "cannot open {}: {}", path.string(), strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Fail(err, "cannot stat {}: {}", path.string(), strerror(err));
  }
  // Its readers walk a tar's headers front to back: the kernel may read further ahead.
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<RangeReader>(
      new FileReader(fd, static_cast<uint64_t>(st.st_size), path.string()));
}

}  // namespace gpufs
