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

#include "base/private_files.h"
#include "fs/control.h"

namespace gpufs {
namespace {

constexpr size_t kMaxRequest = 64 * 1024;
constexpr int kClientTimeoutS = 5;  // a stuck client must not hold the socket

// The folder the socket goes in by name: /run/gpufs for root, else $XDG_RUNTIME_DIR/gpufs,
// else /tmp/gpufs-UID (a name anyone could take first).
std::string NamedRuntimeFolder() {
  if (geteuid() == 0) return "/run/gpufs";
  if (const char* runtime = getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    return fmt::format("{}/gpufs", runtime);
  }
  return fmt::format("/tmp/gpufs-{}", geteuid());
}

struct SocketPlace {
  std::string folder;
  bool fresh = false;  // made for this daemon alone
};

// A folder only this user can enter: the named one when it is ours (made 0700 if absent,
// checked on its descriptor), refused when someone else owns it or may write into it (a
// planted socket would then answer for us). Refused, a fresh folder of a random name under
// /tmp takes its place: another user who made /tmp/gpufs-UID first cannot turn gpufs-stat
// off, which finds the socket through the mount's user.gpufs.control, not this name.
Result<SocketPlace> SocketFolder() {
  const std::string named = NamedRuntimeFolder();
  auto folder = OpenPrivateFolder(named, {"runtime folder", "remove it, or set XDG_RUNTIME_DIR"});
  if (folder) {
    if (!folder->note.empty()) spdlog::warn("{}", folder->note);
    return SocketPlace{named, false};
  }
  std::string fresh = fmt::format("/tmp/gpufs-{}-XXXXXX", geteuid());
  if (mkdtemp(fresh.data()) == nullptr) {
    return Fail(errno, "cannot make a control socket folder: {}; and cannot create {}: {}",
                folder.error().message, fresh, strerror(errno));
  }
  spdlog::warn("{}; the control socket is in {} instead", folder.error().message, fresh);
  return SocketPlace{fresh, true};
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
  auto dir = SocketFolder();
  if (!dir) return dir.error();
  const std::string path = fmt::format("{}/{}.sock", dir->folder, getpid());
  const std::string fresh = dir->fresh ? dir->folder : "";
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
  return std::unique_ptr<ControlServer>(new ControlServer(fs, path, fd, stop, fresh));
}

ControlServer::ControlServer(const Filesystem& fs, std::string path, int listen_fd, int stop_fd,
                             std::string fresh_folder)
    : fs_(fs),
      path_(std::move(path)),
      listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      fresh_folder_(std::move(fresh_folder)) {
  thread_ = std::thread([this] { Serve(); });
}

ControlServer::~ControlServer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(stop_fd_);
  unlink(path_.c_str());
  if (!fresh_folder_.empty()) rmdir(fresh_folder_.c_str());
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
