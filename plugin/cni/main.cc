// fabric-cni: a chained CNI plugin (spec 1.1.0; 0.3.x-1.0.0 chains too) that
// forwards each command to the fabric agent on this node. stdout carries only
// the CNI result or error object.
#include <unistd.h>

#include <iostream>
#include <iterator>
#include <string>

#include "plugin/cni/cni_plugin.h"

extern char** environ;

int main() {
  fabric::cni::EnvLookup env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  fabric::cni::PluginOutput out = fabric::cni::RunPlugin(env, in, fabric::cni::NewGrpcAgentClient);
  if (!out.stdout_data.empty()) {
    std::cout << out.stdout_data << std::flush;
  }
  // Skip static destructors of gRPC internals: the result is already out.
  std::cout.flush();
  ::_exit(out.exit_code);
}
