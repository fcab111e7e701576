#include "fs/problem_log.h"

#include <spdlog/sinks/ringbuffer_sink.h>

namespace gpufs {
namespace {

constexpr size_t kKept = 32;

std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>& Ring() {
  static auto ring = [] {
    auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(kKept);
    sink->set_level(spdlog::level::warn);
    sink->set_pattern("%Y-%m-%d %H:%M:%S %l %v");
    return sink;
  }();
  return ring;
}

}  // namespace

std::shared_ptr<spdlog::sinks::sink> ProblemSink() { return Ring(); }

std::vector<std::string> RecentProblems(size_t limit) {
  std::vector<std::string> lines = Ring()->last_formatted(limit);
  for (std::string& line : lines) {
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  }
  return lines;
}

}  // namespace gpufs
