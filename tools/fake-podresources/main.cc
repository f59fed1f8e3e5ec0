// fake-podresources: serves the kubelet PodResources v1 API on a unix socket
// from a fixed list of Pods (test/fakes/fake_podresources_server.h),
// so the agent's CNI part can answer ADD/DEL outside a cluster (the image
// test's empty-container CNI proof). Runs until SIGTERM/SIGINT.
//
//   fake-podresources SOCKET [NS/POD[/CONTAINER][=RESOURCE:DEVICE_ID[,...]]]...
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "test/fakes/fake_podresources_server.h"

namespace {

bool ParsePod(const std::string& arg, fabric::podresources::FakePod* pod) {
  std::vector<std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
  std::vector<std::string> id = absl::StrSplit(kv[0], '/');
  if (id.size() < 2 || id.size() > 3 || id[0].empty() || id[1].empty()) return false;
  pod->ns = id[0];
  pod->name = id[1];
  fabric::podresources::FakeContainer c;
  c.name = id.size() == 3 ? id[2] : "main";
  if (kv.size() == 2) {
    for (absl::string_view d : absl::StrSplit(kv[1], ',', absl::SkipEmpty())) {
      std::vector<std::string> rd = absl::StrSplit(d, absl::MaxSplits(':', 1));
      if (rd.size() != 2) return false;
      c.devices.push_back({rd[0], rd[1], {}});
    }
  }
  pod->containers.push_back(std::move(c));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SOCKET [NS/POD[/CONTAINER][=RESOURCE:DEVICE_ID,...]]...\n",
                 argv[0]);
    return 1;
  }
  std::vector<fabric::podresources::FakePod> pods;
  for (int i = 2; i < argc; ++i) {
    fabric::podresources::FakePod pod;
    if (!ParsePod(argv[i], &pod)) {
      std::fprintf(stderr, "fake-podresources: bad pod '%s'\n", argv[i]);
      return 1;
    }
    pods.push_back(std::move(pod));
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before gRPC starts its threads

  fabric::podresources::FakePodResourcesServer server;
  server.SetPods(std::move(pods));
  server.EnableGet(true);
  if (absl::Status s = server.Start(argv[1]); !s.ok()) {
    std::fprintf(stderr, "fake-podresources: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("serving PodResources on %s\n", argv[1]);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  server.Stop();
  return 0;
}
