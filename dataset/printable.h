// The one way a name reaches a person or a parser: file and folder names come from dataset
// authors and tar members, process names from whoever runs a process (prctl), and none of
// them may forge a log line, move a terminal's cursor, retitle its window or add a field to
// a machine-readable line. Every log line (cli/daemon_log.cc escapes each message once, in
// the logger), every refusal printed to a terminal and every name gpufs-stat prints goes
// through these.
#pragma once

#include <string>
#include <string_view>

namespace gpufs {

// `text` with every byte that could act on a terminal or a line-based reader written as
// \xNN: C0 controls (newline, CR, ESC, ...), DEL and the backslash itself (so that the
// escape is unambiguous); among UTF-8 sequences, the C1 controls (U+0080-U+009F, CSI among
// them) and the bidirectional overrides that reorder what a reader sees; and any byte that
// is not part of valid UTF-8. Other UTF-8 (names in any script) is kept as it is.
std::string Printable(std::string_view text);

// A whole message that may already hold names escaped by Printable (a log line, a refusal):
// as Printable, but a backslash is kept, so that a name escaped where the message was made
// is not escaped twice.
std::string PrintableLine(std::string_view text);

// `text` as one value of a KEY=VALUE line (gpufs-stat -o kv): Printable, and quoted with
// "..." when it holds a blank, '=' or '"' (a '"' inside written \"), so that a name such as
// `a Files=0` stays one value. Empty: "".
std::string KvValue(std::string_view text);

}  // namespace gpufs
