#include "cli/metrics_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <charconv>

#include "fs/control.h"

namespace gpufs {

MetricsServer::MetricsServer() : server_(std::make_unique<httplib::Server>()) {}

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
  std::unique_ptr<MetricsServer> metrics(new MetricsServer());
  if (!metrics->server_->bind_to_port(host, port)) {
    return Fail(EADDRINUSE, "cannot serve metrics at {}: cannot bind (in use, or no such address)",
                address);
  }
  return metrics;
}

void MetricsServer::Start(const Filesystem& fs) {
  // One scraper at a time is plenty; the default pool would start a thread per core.
  server_->new_task_queue = [] { return new httplib::ThreadPool(1); };
  server_->Get("/metrics", [&fs](const httplib::Request&, httplib::Response& response) {
    response.set_content(MetricsText(fs), "text/plain; version=0.0.4");
  });
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind()) spdlog::error("the metrics endpoint stopped");
  });
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gpufs
