#include "agent/base/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/parse.h"

namespace fabric {

void ParseCommandLine(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> fixed;
  for (std::string& a : args) {
    if (a.rfind("--", 0) == 0) {
      const size_t end = a.find('=');
      for (size_t i = 2; i < (end == std::string::npos ? a.size() : end); ++i) {
        if (a[i] == '-') a[i] = '_';
      }
    }
    fixed.push_back(a.data());
  }
  absl::ParseCommandLine(static_cast<int>(fixed.size()), fixed.data());
}

}  // namespace fabric
