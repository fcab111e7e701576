// The AWS tools' shared files, ~/.aws/credentials and ~/.aws/config: INI sections of
// `key = value` lines. The credentials file names a profile `[NAME]`; the config file
// `[profile NAME]`, except the default profile, which is `[default]` in both. An indented
// line under a key with no value is a nested setting (`s3 =` then `  addressing_style =
// path`), kept here as "s3.addressing_style".
//
// The files are the user's, not the network's, but they are parsed as untrusted all the
// same (fuzz_aws_config): a line that is none of the above is an error naming the file and
// line, never a guess.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "base/error.h"

namespace gpufs::remote {

using IniSection = std::map<std::string, std::string>;
using IniFile = std::map<std::string, IniSection>;  // by section name, as written

// Parses `text`; errors (EINVAL) read "cannot parse FILE:LINE: reason", FILE being `file`.
// Values are trimmed; a later key or section of the same name adds to or replaces the
// earlier one, as the AWS tools do.
Result<IniFile> ParseIni(std::string_view text, std::string_view file);

// The settings of `profile` in a parsed file: from `[NAME]` in a credentials file, from
// `[profile NAME]` (or `[default]` for "default") in a config file. Null when absent.
const IniSection* FindProfile(const IniFile& ini, std::string_view profile, bool config_file);

}  // namespace gpufs::remote
