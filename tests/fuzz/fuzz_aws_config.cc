// Fuzzes the reader of the AWS tools' shared files (source/remote/credentials/aws_config.h) and
// what ResolveLocation makes of them: the input is both the credentials and the config file.
//
// A file is parsed or refused naming itself and a line; a location that resolves has an
// http(s) endpoint, a region, and either both keys or none.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "source/remote/credentials/aws_config.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/location.h"
#include "tests/fuzz/mem_file.h"

namespace gpufs::fuzz {
namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

void CheckIni(std::string_view input) {
  Result<remote::IniFile> ini = remote::ParseIni(input, "fuzz");
  if (!ini.ok()) {
    Require(ini.error().code == EINVAL, "a refused file is not EINVAL");
    Require(ini.error().message.starts_with("cannot parse fuzz:"), "no file:line in an error");
    return;
  }
  for (const auto& [name, section] : *ini) {
    Require(!name.empty(), "a section without a name");
    for (const auto& [key, value] : section) Require(!key.empty(), "a setting without a key");
  }
  (void)remote::FindProfile(*ini, "default", true);
  (void)remote::FindProfile(*ini, "default", false);
}

void CheckLocation(const MemFile& file) {
  const std::string path = file.path().string();
  for (const char* profile : {"", "test"}) {
    std::map<std::string, std::string> env = {{"AWS_CONFIG_FILE", path},
                                              {"AWS_SHARED_CREDENTIALS_FILE", path},
                                              {"AWS_EC2_METADATA_DISABLED", "true"}};
    if (*profile != '\0') env["AWS_PROFILE"] = profile;
    Result<remote::Location> location =
        remote::ResolveLocation("s3://bucket/root/",
                                {.endpoint = "",
                                 .no_sign_request = false,
                                 .connections = 16,
                                 .active_credential_sources = false},
                                env);
    if (!location.ok()) continue;
    const remote::StoreConfig& config = location->config;
    Require(config.endpoint.starts_with("http://") || config.endpoint.starts_with("https://"),
            "an endpoint that is not http(s)");
    Require(!config.region.empty(), "no region");
    Require(config.credentials != nullptr, "resolved without credentials or --no-sign-request");
    const auto keys = config.credentials->Current();
    Require(!keys->access_key.empty() && !keys->secret_key.empty(), "half a key");
  }
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpufs::fuzz::MemFile file("aws-config");
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  gpufs::fuzz::CheckIni(input);
  file.Assign(data, size);
  gpufs::fuzz::CheckLocation(file);
  return 0;
}
