// rdma-netns-probe: a tiny CLI over MnlRdmaNetlink so the real kernel path can
// be exercised on a node or in the soft-RoCE VM (test/e2e/cases/06-netns.sh).
//   rdma-netns-probe get-mode                 -> "shared" | "exclusive"
//   rdma-netns-probe list [NETNS_PATH]        -> "<index> <name>" per device
//   rdma-netns-probe move DEV NETNS_PATH      -> host netns -> NETNS_PATH
//   rdma-netns-probe move-back DEV NETNS_PATH -> NETNS_PATH -> host netns
// Results on stdout; errors on stderr, exit status 1 (2 for usage).
#include <cstdio>
#include <string>

#include "agent/netns/rdma_netlink_mnl.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: rdma-netns-probe get-mode | list [NETNS_PATH] | move DEV NETNS_PATH | "
               "move-back DEV NETNS_PATH\n");
  return 2;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "rdma-netns-probe: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  std::string cmd = argv[1];
  auto nl = fabric::netns::MnlRdmaNetlink::Create();
  if (!nl.ok()) return Fail(nl.status());
  if (cmd == "get-mode" && argc == 2) {
    auto mode = (*nl)->GetNetnsMode();
    if (!mode.ok()) return Fail(mode.status());
    std::printf("%s\n", fabric::netns::NetnsModeName(*mode));
    return 0;
  }
  if (cmd == "list" && argc <= 3) {
    auto links = (*nl)->ListDevices(argc == 3 ? argv[2] : "");
    if (!links.ok()) return Fail(links.status());
    for (const auto& l : *links) std::printf("%u %s\n", l.index, l.name.c_str());
    return 0;
  }
  if ((cmd == "move" || cmd == "move-back") && argc == 4) {
    absl::Status s = cmd == "move" ? (*nl)->MoveDevice(argv[2], "", argv[3])
                                   : (*nl)->MoveDevice(argv[2], argv[3], "");
    if (!s.ok()) return Fail(s);
    std::printf("moved %s\n", argv[2]);
    return 0;
  }
  return Usage();
}
