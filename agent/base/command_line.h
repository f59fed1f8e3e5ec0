// One command-line parser for every binary: absl's flags, accepting the
// documented dash spelling (--sysfs-root) as well as absl's underscores.
#ifndef FABRIC_AGENT_BASE_COMMAND_LINE_H_
#define FABRIC_AGENT_BASE_COMMAND_LINE_H_

namespace fabric {

// absl::ParseCommandLine over argv with "--a-b[=v]" rewritten to "--a_b[=v]"
// (flag names only; values keep their dashes). Exits on a bad flag, as absl does.
void ParseCommandLine(int argc, char** argv);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_COMMAND_LINE_H_
