#include "cli/stat/stat_source.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/xattr_names.h"

namespace gpufs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits(field.substr(i + 1, 3));
      out += static_cast<char>(std::stoi(digits, nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

bool Under(const std::string& path, const std::string& mount) {
  if (mount == "/") return true;
  return path.compare(0, mount.size(), mount) == 0 &&
         (path.size() == mount.size() || path[mount.size()] == '/');
}

}  // namespace

Result<MountPoint> MountOf(const std::filesystem::path& path) {
  std::ifstream table("/proc/self/mountinfo");
  if (!table) return Fail(errno, "cannot read /proc/self/mountinfo: {}", strerror(errno));
  const std::string target = path.string();
  MountPoint best;
  std::string line;
  while (std::getline(table, line)) {
    // id parent major:minor root mountpoint options [optional...] - type source super
    std::istringstream fields(line);
    std::string id, parent, dev, root, where, options, word;
    fields >> id >> parent >> dev >> root >> where >> options;
    while (fields >> word && word != "-") {
    }
    MountPoint mount;
    mount.path = Unescape(where);
    fields >> mount.type >> mount.source;
    mount.source = Unescape(mount.source);
    mount.device = dev;
    // Later lines are mounted over earlier ones: the last, longest match is what is seen.
    if (Under(target, mount.path) && mount.path.size() >= best.path.size()) best = mount;
  }
  if (best.path.empty()) return Fail(ENOENT, "cannot find the mount holding {}", target);
  return best;
}

// getxattr through a mount waits for the daemon, and a request a stopped daemon has
// already taken cannot be interrupted, not even by SIGKILL: the waiting thread would keep
// its whole process from exiting. So the call runs in a child process, cut off from our
// output, and on a timeout the child is left behind (it ends when the daemon answers or
// the mount goes) while we go on.
Result<std::string> RootXattr(const std::string& mount, const char* name, double timeout_s) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0)
    return Fail(errno, "cannot make a pipe: {}", strerror(errno));
  const pid_t child = fork();
  if (child == 0) {
    const int null = open("/dev/null", O_RDWR);
    for (int fd : {0, 1, 2}) dup2(null, fd);
    char buffer[4096];
    const ssize_t n = getxattr(mount.c_str(), name, buffer, sizeof(buffer));
    const int reply[2] = {n < 0 ? errno : 0, static_cast<int>(n < 0 ? 0 : n)};
    if (write(pipe_fds[1], reply, sizeof(reply)) == sizeof(reply) && n > 0) {
      (void)!write(pipe_fds[1], buffer, static_cast<size_t>(n));
    }
    _exit(0);
  }
  close(pipe_fds[1]);
  if (child < 0) {
    close(pipe_fds[0]);
    return Fail(errno, "cannot fork: {}", strerror(errno));
  }
  pollfd ready{pipe_fds[0], POLLIN, 0};
  const int waited = poll(&ready, 1, static_cast<int>(timeout_s * 1000));
  int reply[2] = {EIO, 0};
  char buffer[4096];
  ssize_t got = 0;
  if (waited > 0 && read(pipe_fds[0], reply, sizeof(reply)) == sizeof(reply) && reply[1] > 0) {
    got = read(pipe_fds[0], buffer, static_cast<size_t>(reply[1]));
  }
  close(pipe_fds[0]);
  if (waited <= 0) {
    return Fail(ETIMEDOUT,
                "{}: the gpufsd serving this mount does not answer (stopped or busy "
                "for over {:g} s)",
                mount, timeout_s);
  }
  waitpid(child, nullptr, 0);
  if (reply[0] == ENOTCONN) {
    return Fail(ENOTCONN, "{}: the gpufsd serving this mount has exited", mount);
  }
  if (reply[0] != 0) {
    return Fail(reply[0], "cannot read {} of {}: {}", name, mount, strerror(reply[0]));
  }
  if (got != reply[1]) return Fail(EIO, "cannot read {} of {}: short reply", name, mount);
  return std::string(buffer, static_cast<size_t>(got));
}

Result<DaemonClient> DaemonClient::Connect(const MountPoint& mount, double timeout_s) {
  auto socket = RootXattr(mount.path, xattr::kControl, timeout_s);
  if (!socket && socket.error().code == ENOTCONN) {
    return Fail(ENOTCONN,
                "{} (the mount is left dangling); remove it with `gpufsd unmount {}` or "
                "`fusermount3 -u {}`",
                socket.error().message, mount.path, mount.path);
  }
  if (!socket && socket.error().code == ENODATA) {
    return Fail(ENODATA, "{}: the gpufsd serving this mount has no control socket (see its log)",
                mount.path);
  }
  if (!socket) return socket.error();
  return DaemonClient(mount.path, *socket, timeout_s);
}

Result<std::string> DaemonClient::Ask(const nlohmann::json& request) const {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(errno, "cannot make a socket: {}", strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) {
    close(*p);
    delete p;
  });
  const auto micros = static_cast<long>(timeout_s_ * 1e6);
  const timeval timeout{micros / 1000000, micros % 1000000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return Fail(errno, "cannot reach the gpufsd of {} at {}: {}", mount_, socket_, strerror(errno));
  }
  const std::string line = request.dump() + "\n";
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    return Fail(errno, "cannot ask the gpufsd of {}: {}", mount_, strerror(errno));
  }
  std::string reply;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Fail(errno, "the gpufsd of {} did not answer: {}", mount_, strerror(errno));
    }
    if (n == 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  return reply;
}

Result<nlohmann::json> DaemonClient::Stats() const {
  auto reply = Ask({{"op", "stats"}});
  if (!reply) return reply.error();
  auto stats = nlohmann::json::parse(*reply, nullptr, false);
  if (stats.is_discarded()) return Fail(EPROTO, "the gpufsd of {} sent a bad reply", mount_);
  if (stats.contains("error")) {
    return Fail(EPROTO, "the gpufsd of {}: {}", mount_, stats["error"].get<std::string>());
  }
  return stats;
}

Result<ConnectedMount> ConnectToMountOf(const std::string& path, std::string_view why,
                                        double timeout_s) {
  const std::string absolute = std::filesystem::absolute(path).lexically_normal().string();
  auto mount = MountOf(absolute);
  if (!mount) return mount.error();
  if (!mount->is_gpufs()) return Fail(EINVAL, "{} is not on a gpufs mount; {}", path, why);
  auto client = DaemonClient::Connect(*mount, timeout_s);
  if (!client) return client.error();
  return ConnectedMount{std::move(*mount), std::move(*client)};
}

}  // namespace gpufs
