#include "cli/daemon_life.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace gpufs {

// The kernel caps a FUSE mount's read-ahead at 128 KiB during INIT; only the mount's bdi
// in sysfs can raise it, and only after INIT has been answered.
void RaiseReadahead(const std::string& mountpoint, unsigned kib) {
  struct stat st {};
  if (kib == 0 || stat(mountpoint.c_str(), &st) != 0) return;
  // A FUSE mount's device is anonymous (0:N); any other is a disk's, shared by the system.
  if (major(st.st_dev) != 0) return;
  const std::string knob =
      fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", major(st.st_dev), minor(st.st_dev));
  std::ofstream out(knob);
  out << kib;
  out.close();
  if (!out) spdlog::info("read-ahead left at the kernel default: cannot write {}", knob);
}

void SignalReady(int fd) {
  if (fd < 0) return;
  const char message[] = "ready\n";
  [[maybe_unused]] ssize_t n = write(fd, message, sizeof(message) - 1);
  close(fd);
}

// Forks; the parent waits until the child reports the mount usable, then exits with
// status 0, or with 1 when the child died first. Returns the write end in the child.
int Detach() {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child > 0) {
    close(ready[1]);
    char buffer[16];
    const ssize_t n = read(ready[0], buffer, sizeof(buffer));
    if (n > 0) _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    fmt::print(stderr, "gpufsd: the daemon exited before the mount was ready\n");
    _exit(1);
  }
  close(ready[0]);
  setsid();
  if (chdir("/") != 0) spdlog::warn("cannot change folder to /: {}", strerror(errno));
  return ready[1];
}

void DropTerminal() {
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return;
  dup2(null_fd, STDIN_FILENO);
  dup2(null_fd, STDOUT_FILENO);
  dup2(null_fd, STDERR_FILENO);
  close(null_fd);
}

}  // namespace gpufs
