// gpufs-stat --advise: is training waiting on data, and what budget would stop it; one
// screen of words and numbers from the daemon's stall account and what-if model
// (cache/account/advice.h), its JSON, and a plot of the model's curve.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gpufs {

struct AdviseOptions {
  bool json = false;
  std::string plot;  // a PNG to draw, when not empty
  double timeout_s = 120;
};

// The screen for an advice reply (advice_stat keys).
std::string AdviceScreen(const std::string& mount, const nlohmann::json& advice);

int RunAdvise(const std::string& path, const AdviseOptions& options);

}  // namespace gpufs
