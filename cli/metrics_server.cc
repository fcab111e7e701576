#include "cli/metrics_server.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <vector>

#include "fs/control.h"
#include "fs/metrics.h"

namespace gpufs {
namespace {

using Clock = std::chrono::steady_clock;

// One connection: its request head as read so far, then its whole answer as written so far.
struct Client {
  UniqueFd fd;
  Clock::time_point deadline;
  std::string in;
  std::string out;
  size_t sent = 0;
};

std::string Answer(int status, const char* reason, const std::string& type,
                   const std::string& body) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      status, reason, type, body.size(), body);
}

// The answer to a whole request head: GET (or HEAD) of /metrics, with or without a query.
std::string AnswerTo(std::string_view head, const Filesystem& fs) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const size_t space = line.find(' ');
  const std::string_view method = line.substr(0, space);
  std::string_view target = space == std::string_view::npos ? "" : line.substr(space + 1);
  target = target.substr(0, target.find(' '));
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    return Answer(405, "Method Not Allowed", "text/plain", "GET /metrics\n");
  }
  if (target != "/metrics") return Answer(404, "Not Found", "text/plain", "GET /metrics\n");
  std::string answer = Answer(200, "OK", "text/plain; version=0.0.4", MetricsText(fs));
  if (method == "HEAD") answer.resize(answer.find("\r\n\r\n") + 4);
  return answer;
}

// Reads what `client` sent; once its head is whole (or too long), its answer is ready.
// False: the client is done with (closed, failed).
bool ReadRequest(Client& client, const Filesystem& fs) {
  char buffer[2048];
  const ssize_t n = recv(client.fd.get(), buffer, sizeof(buffer), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) return false;
  client.in.append(buffer, static_cast<size_t>(n));
  if (client.in.find("\r\n\r\n") != std::string::npos) {
    client.out = AnswerTo(client.in, fs);
  } else if (client.in.size() > MetricsServer::kMaxRequestBytes) {
    client.out = Answer(431, "Request Header Fields Too Large", "text/plain", "");
  }
  return true;
}

// Writes what it can of the answer. False: done (all sent, or the client went away).
bool WriteAnswer(Client& client) {
  const ssize_t n = send(client.fd.get(), client.out.data() + client.sent,
                         client.out.size() - client.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  client.sent += static_cast<size_t>(n);
  return client.sent < client.out.size();
}

int PollTimeoutMs(const std::vector<Client>& clients) {
  if (clients.empty()) return -1;
  const auto first = std::min_element(clients.begin(), clients.end(),
                                      [](auto& a, auto& b) { return a.deadline < b.deadline; });
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(first->deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

Result<UniqueFd> Listen(const std::string& host, const std::string& port,
                        const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) found = nullptr;
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int yes = 1;
    if (fd.get() < 0 || setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) != 0 ||
        bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), 16) != 0) {
      continue;
    }
    return fd;
  }
  return Fail(EADDRINUSE, "cannot serve metrics at {}: cannot bind (in use, or no such address)",
              address);
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Bind(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  const char* end = address.data() + address.size();
  if (colon == std::string::npos || colon == 0 ||
      std::from_chars(address.data() + colon + 1, end, port).ptr != end || port <= 0 ||
      port > 65535) {
    return Fail(EINVAL, "cannot serve metrics at '{}': use HOST:PORT, e.g. 127.0.0.1:9464",
                address);
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:9464
  }
  Result<UniqueFd> listening = Listen(host, std::to_string(port), address);
  if (!listening.ok()) return listening.error();
  std::unique_ptr<MetricsServer> metrics(new MetricsServer());
  metrics->listen_ = std::move(*listening);
  metrics->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (metrics->wake_.get() < 0) {
    return Fail(errno, "cannot serve metrics at {}: {}", address, strerror(errno));
  }
  return metrics;
}

void MetricsServer::Start(const Filesystem& fs) {
  thread_ = std::thread([this, &fs] { Serve(fs); });
}

void MetricsServer::Serve(const Filesystem& fs) {
  std::vector<Client> clients;
  std::vector<pollfd> polled;
  for (;;) {
    const bool accepting = clients.size() < kMaxClients;
    polled.assign({{wake_.get(), POLLIN, 0}, {accepting ? listen_.get() : -1, POLLIN, 0}});
    for (const Client& c : clients) {
      polled.push_back({c.fd.get(), static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    }
    if (poll(polled.data(), polled.size(), PollTimeoutMs(clients)) < 0 && errno != EINTR) {
      spdlog::error("the metrics endpoint stopped: {}", strerror(errno));
      return;
    }
    if (polled[0].revents != 0) return;
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short events = polled[i + 2].revents;
      bool open = now < c.deadline;
      if (open && events != 0) open = c.out.empty() ? ReadRequest(c, fs) : WriteAnswer(c);
      if (open && !c.out.empty() && c.sent == 0) open = WriteAnswer(c);
      if (!open) c.fd = UniqueFd();
    }
    std::erase_if(clients, [](const Client& c) { return c.fd.get() < 0; });
    if (accepting && (polled[1].revents & POLLIN) != 0) {
      UniqueFd fd(accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (fd.get() >= 0) clients.push_back({std::move(fd), now + kRequestDeadline, {}, {}, 0});
    }
  }
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(wake_.get(), &one, sizeof(one)) < 0) spdlog::warn("cannot stop the metrics thread");
    thread_.join();
  }
}

}  // namespace gpufs
