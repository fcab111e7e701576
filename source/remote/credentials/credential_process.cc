// credential_process: a program the user configured prints keys as JSON. It runs without
// a shell (its words split as the AWS CLI splits them), with the daemon's environment, and
// is killed when it takes longer than a minute.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "source/remote/credentials/credential_http.h"
#include "source/remote/credentials/credential_sources.h"

extern char** environ;

namespace gpufs::remote {
namespace {

constexpr auto kProcessDeadline = std::chrono::seconds(60);
constexpr size_t kMaxOutput = 1 << 20;

struct Output {
  std::string out;
  std::string err;
  int status = 0;
  bool timed_out = false;
};

// Reads both pipes until both close or the deadline passes.
void Drain(int out_fd, int err_fd, Output& output) {
  const auto deadline = std::chrono::steady_clock::now() + kProcessDeadline;
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&output.out, &output.err};
  int open = 2;
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      output.timed_out = true;
      return;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) return;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        fds[i].fd = -1;
        --open;
      } else if (sinks[i]->size() < kMaxOutput) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      }
    }
  }
}

Result<Output> Run(const std::vector<std::string>& words) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Fail(errno, "cannot make a pipe: {}", strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Fail(errno, "cannot make a pipe: {}", strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<char*> argv;
  for (const std::string& word : words) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  Output output;
  if (spawned == 0) Drain(out[0], err[0], output);
  close(out[0]);
  close(err[0]);
  if (spawned != 0) return Fail(spawned, "cannot run {}: {}", words[0], strerror(spawned));
  if (output.timed_out) kill(pid, SIGKILL);
  while (waitpid(pid, &output.status, 0) < 0 && errno == EINTR) {
  }
  return output;
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > 300) line.resize(300);
  return line.empty() ? "(nothing on stderr)" : line;
}

class Process final : public CredentialSource {
 public:
  Process(std::string command, std::string origin)
      : command_(std::move(command)), origin_(std::move(origin)) {}

  Result<CredentialSet> Fetch() override {
    Result<std::vector<std::string>> words = SplitCommand(command_);
    if (!words.ok()) return Failure(words.error().message);
    Result<Output> output = Run(*words);
    if (!output.ok()) return Failure(output.error().message);
    if (output->timed_out) {
      return Failure(fmt::format("the program ran longer than {} s", kProcessDeadline.count()));
    }
    const int status = output->status;
    if (WIFSIGNALED(status)) {
      return Failure(fmt::format("the program was killed by signal {}: {}", WTERMSIG(status),
                                 FirstLine(output->err)));
    }
    if (WEXITSTATUS(status) != 0) {
      return Failure(fmt::format("the program exited with status {}: {}", WEXITSTATUS(status),
                                 FirstLine(output->err)));
    }
    Result<CredentialSet> set = ParseCredentialJson(output->out, true);
    if (!set.ok()) return Failure("the program printed no usable keys: " + set.error().message);
    return set;
  }

  std::string Describe() const override { return "credential_process of " + origin_; }

 private:
  Error Failure(const std::string& why) const {
    return Fail(EACCES, "cannot get credentials from {}: {}", Describe(), why);
  }

  std::string command_;
  std::string origin_;
};

}  // namespace

Result<std::vector<std::string>> SplitCommand(std::string_view command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const size_t end = command.find('\'', i + 1);
      if (end == std::string_view::npos) return Fail(EINVAL, "an unclosed ' in the command");
      word.append(command.substr(i + 1, end - i - 1));
      i = end;
      in_word = true;
    } else if (c == '"') {
      for (++i; i < command.size() && command[i] != '"'; ++i) {
        if (command[i] == '\\' && i + 1 < command.size() &&
            std::string_view("\"\\$`").find(command[i + 1]) != std::string_view::npos) {
          ++i;
        }
        word.push_back(command[i]);
      }
      if (i >= command.size()) return Fail(EINVAL, "an unclosed \" in the command");
      in_word = true;
    } else if (c == '\\' && i + 1 < command.size()) {
      word.push_back(command[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) return Fail(EINVAL, "the command is empty");
  return words;
}

std::unique_ptr<CredentialSource> ProcessSource(std::string command, std::string origin) {
  return std::make_unique<Process>(std::move(command), std::move(origin));
}

}  // namespace gpufs::remote
