#include "cli/control_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

#include "fs/control.h"

namespace gpufs {
namespace {

constexpr size_t kMaxRequest = 64 * 1024;
constexpr int kClientTimeoutS = 5;  // a stuck client must not hold the socket

// A folder only this user can enter: made if absent, refused if someone else owns it or
// others may write into it (a planted socket would then answer for us).
Result<std::string> PrivateFolder() {
  std::string dir;
  if (getuid() == 0) {
    dir = "/run/gpufs";
  } else if (const char* runtime = getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    dir = fmt::format("{}/gpufs", runtime);
  } else {
    dir = fmt::format("/tmp/gpufs-{}", getuid());
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Fail(errno, "cannot make {}: {}", dir, strerror(errno));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return Fail(errno, "cannot stat {}: {}", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
    return Fail(EPERM, "cannot use {}: not a folder private to user {}", dir, getuid());
  }
  return dir;
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const Filesystem& fs) {
  auto dir = PrivateFolder();
  if (!dir) return dir.error();
  const std::string path = fmt::format("{}/{}.sock", *dir, getpid());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return Fail(ENAMETOOLONG, "cannot listen at {}: the path is too long", path);
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(errno, "cannot make a socket: {}", strerror(errno));
  unlink(path.c_str());  // left by an earlier daemon with this pid that was killed
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 16) != 0) {
    const int saved = errno;
    close(fd);
    return Fail(saved, "cannot listen at {}: {}", path, strerror(saved));
  }
  const int stop = eventfd(0, EFD_CLOEXEC);
  if (stop < 0) {
    const int saved = errno;
    close(fd);
    unlink(path.c_str());
    return Fail(saved, "cannot make an eventfd: {}", strerror(saved));
  }
  return std::unique_ptr<ControlServer>(new ControlServer(fs, path, fd, stop));
}

ControlServer::ControlServer(const Filesystem& fs, std::string path, int listen_fd, int stop_fd)
    : fs_(fs), path_(std::move(path)), listen_fd_(listen_fd), stop_fd_(stop_fd) {
  thread_ = std::thread([this] { Serve(); });
}

ControlServer::~ControlServer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(stop_fd_);
  unlink(path_.c_str());
}

void ControlServer::Serve() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("control socket {}: {}", path_, strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Answer(client);
    close(client);
  }
}

void ControlServer::Answer(int fd) {
  const timeval timeout{kClientTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buffer[4096];
  while (request.find('\n') == std::string::npos && request.size() < kMaxRequest) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  request.resize(std::min(request.size(), request.find('\n')));
  bool open = true;
  try {
    HandleControlRequest(fs_, request,
                         [&](std::string_view piece) { open = open && SendAll(fd, piece); });
  } catch (const std::exception& e) {
    spdlog::error("cannot answer a control request: {}", e.what());
  }
}

}  // namespace gpufs
