#include "cli/options/usage.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace gpufs {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Every long option name of `app` and its subcommands, as typed ("--cache-size").
void LongNames(const CLI::App& app, std::vector<std::string>& names) {
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  }
  for (const CLI::App* sub : app.get_subcommands({})) LongNames(*sub, names);
}

// "did you mean --cache-size?" for each --word of argv that no option has, if one is near;
// how many were said.
int SuggestNearest(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  LongNames(app, names);
  int said = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string word = std::string(argv[i]).substr(0, std::string(argv[i]).find('='));
    if (!word.starts_with("--") || word == "--" ||
        std::find(names.begin(), names.end(), word) != names.end()) {
      continue;
    }
    const std::string nearest = NearestWord(word, names);
    if (!nearest.empty()) {
      fmt::print(stderr, "{}: unknown option {}; did you mean {}?\n",
                 std::filesystem::path(argv[0]).filename().string(), word, nearest);
      ++said;
    }
  }
  return said;
}

// "gpufsd mount": the tool and the subcommand the error is about, as a person types them.
std::string CommandOf(const CLI::App& app, const char* argv0) {
  std::string command = std::filesystem::path(argv0).filename().string();
  for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
  return command;
}

}  // namespace

std::string NearestWord(const std::string& word, const std::vector<std::string>& words) {
  const auto nearest = std::min_element(words.begin(), words.end(), [&](auto& a, auto& b) {
    return EditDistance(word, a) < EditDistance(word, b);
  });
  return nearest != words.end() && EditDistance(word, *nearest) <= 3 ? *nearest : "";
}

std::optional<int> ParseUsage(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // An unknown option near a known one: the suggestion says it all.
    const bool extras = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    if (SuggestNearest(app, argc, argv) > 0 && extras) return kUsageError;
    const std::string command = CommandOf(app, argv[0]);
    fmt::print(stderr, "{}: {}; `{} --help` lists the options\n", command, e.what(), command);
    return kUsageError;
  }
}

}  // namespace gpufs
