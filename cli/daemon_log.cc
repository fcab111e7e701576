#include "cli/daemon_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dataset/open/open_dataset.h"
#include "dataset/printable.h"
#include "fs/problem_log.h"

namespace gpufs {
namespace {

constexpr const char* kPattern = "%Y-%m-%d %H:%M:%S.%e gpufsd[%P] %l: %v";

// Lines appended to a descriptor gpufs opened itself (O_APPEND: logrotate's copytruncate
// and several writers keep whole lines).
class FdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FdSink(int fd) : fd_(fd) { set_pattern(kPattern); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    for (size_t at = 0; at < line.size();) {
      const ssize_t n = write(fd_, line.data() + at, line.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses log lines, never a read
      at += static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  int fd_;
};

// Every message is written through PrintableLine once, here: the names in messages come
// from dataset authors, tar members and other users' processes (dataset/printable.h), and
// each sink (the terminal, the file, syslog, the problem ring) gets the escaped line.
class PrintableLogger final : public spdlog::logger {
 public:
  using spdlog::logger::logger;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    const std::string printable = PrintableLine(payload);
    if (printable == payload) return spdlog::logger::sink_it_(msg);
    spdlog::details::log_msg escaped = msg;
    escaped.payload = printable;
    spdlog::logger::sink_it_(escaped);
  }
};

bool SyslogAnswers() {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, "/dev/log", sizeof(address.sun_path) - 1);
  const bool up = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return up;
}

// Opens `name` beneath the checked folder `dir_fd` for appending, creating it 0600; a
// link there is refused, and so is a file that is not this user's.
Result<UniqueFd> OpenLogFile(int dir_fd, const std::string& name, const std::string& shown) {
  UniqueFd fd(openat(dir_fd, name.c_str(),
                     O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
  if (fd.get() < 0) {
    const char* why = errno == ELOOP ? "it is a symbolic link" : strerror(errno);
    return Fail(errno, "cannot log to {}: {}", shown, why);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    return Fail(EPERM, "cannot log to {}: not a regular file of yours", shown);
  }
  return fd;
}

void Install(std::shared_ptr<spdlog::logger> logger, spdlog::level::level_enum level) {
  logger->sinks().push_back(ProblemSink());
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace

void EscapeDefaultLog() {
  // What a command logs before DaemonLog takes over (a mount's listing, a store that does
  // not answer) is the terminal's, beside the command's other messages.
  auto terminal = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  terminal->set_pattern("gpufsd: %l: %v");
  auto logger = std::make_shared<PrintableLogger>("gpufsd", std::move(terminal));
  logger->set_level(spdlog::level::warn);  // the terminal hears of problems, the log of the rest
  spdlog::set_default_logger(std::move(logger));
}

std::filesystem::path DefaultLogFolder() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "gpufs";
  }
  if (geteuid() == 0) return "/var/log/gpufs";
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".local" / "state" / "gpufs";
  }
  // No HOME (a daemon of slurmd or a system unit): beside the user's private cache folder,
  // whose own rules find the home from the password database.
  return DefaultCacheDir() / "log";
}

Result<DaemonLog> DaemonLog::Open(const LogOptions& options, bool foreground) {
  DaemonLog log;
  log.level_ = spdlog::level::from_str(options.level);
  if (!options.file.empty()) {
    // Every level above the file is walked as for the private folders: a user who may
    // write a folder above root's log file could otherwise point it anywhere.
    const std::filesystem::path path = std::filesystem::absolute(options.file).lexically_normal();
    auto folder = OpenFolderAbove(path, {"log file", "name a log file with --log-file"});
    if (!folder.ok()) return folder.error();
    Result<UniqueFd> fd = OpenLogFile(folder->get(), path.filename(), path);
    if (!fd.ok()) return fd.error();
    log.file_ = std::move(*fd);
    log.where_ = path.string();
  } else if (foreground) {
    log.where_ = "stderr";
  } else if (SyslogAnswers()) {
    log.where_ = "syslog";
  } else {
    const std::filesystem::path folder = DefaultLogFolder();
    auto opened = OpenPrivateFolder(folder, {"log folder", "name a log file with --log-file"});
    if (!opened.ok()) return opened.error();
    log.where_ = (folder / "gpufsd.log").string();
    Result<UniqueFd> fd = OpenLogFile(opened->fd.get(), "gpufsd.log", log.where_);
    if (!fd.ok()) return fd.error();
    log.file_ = std::move(*fd);
    log.fallback_ = true;
  }
  if (foreground) {
    auto logger = std::make_shared<PrintableLogger>(
        "gpufsd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    if (log.file_.get() >= 0) logger->sinks().push_back(std::make_shared<FdSink>(log.file_.get()));
    Install(std::move(logger), log.level_);
  }
  return log;
}

void DaemonLog::UseInDaemon() {
  // Said once the mount goes ahead (the terminal is still the caller's until it is ready).
  if (fallback_) fmt::print(stderr, "gpufsd: no syslog at /dev/log: logging to {}\n", where_);
  std::shared_ptr<spdlog::logger> logger;
  if (file_.get() >= 0) {
    logger = std::make_shared<PrintableLogger>("gpufsd", std::make_shared<FdSink>(file_.get()));
  } else {
    logger = std::make_shared<PrintableLogger>(
        "gpufsd",
        std::make_shared<spdlog::sinks::syslog_sink_mt>("gpufsd", LOG_PID, LOG_USER, false));
  }
  // The terminal hears of problems until the mount is ready and it is dropped, in the words
  // the process that was started uses (EscapeDefaultLog): what the daemon opens, such as the
  // disk tier, is said there as a check before the fork would have said it.
  auto terminal = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  terminal->set_pattern("gpufsd: %l: %v");
  terminal->set_level(spdlog::level::warn);
  logger->sinks().push_back(terminal);
  Install(std::move(logger), level_);
}

}  // namespace gpufs
