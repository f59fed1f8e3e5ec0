// The sysfs readers: agent/base/file_util (ReadInt, ReadU64, ReadHex,
// ReadDevNumbers, QuoteContent), agent/base/counter_file (ParseCounterText,
// CounterFile), and the discovery walk (agent/sysfs/sysfs_discovery) over
// a fake tree laid out by agent/sysfs/sysfs_layout, whose files hold the
// fuzzed contents. sysfs is the kernel's, but a driver bug, a half-written
// attribute or a bind-mounted fake must not take the agent down.
// Input: consumed by FuzzedDataProvider as one "file content" for the
// single-file readers, then the contents of each attribute file of a
// one-device tree (ibdev, dev, vendor, device, numa_node, sriov_numvfs, port
// state and phys_state, link_layer, rate, node_guid, rdma_cm's dev).
// Invariants:
//  - every reader either succeeds or fails with kInvalidArgument, and a
//    value it accepts, written back the way the kernel writes it ("%d\n",
//    "0x%04x\n", "%u:%u\n"), reads back to the same value;
//  - the two counter readers agree: ParseCounterText, CounterFile::Read and
//    ReadU64 accept the same texts with the same values;
//  - QuoteContent (what warnings and errors quote) is one line of printable
//    ASCII of bounded length, whatever the bytes;
//  - DiscoverNode succeeds (only transient read errors may fail a pass, and
//    content is never one); the device is either listed or skipped with a
//    warning, never both; a listed device has at least one port, a PCI
//    function with numa_node >= -1 and sriov_numvfs >= 0, and port states
//    that ParseNumberedState accepts again.
#include <fcntl.h>
#include <ftw.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/counter_file.h"
#include "agent/base/file_util.h"
#include "agent/base/host_paths.h"
#include "agent/base/logging.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "agent/sysfs/sysfs_layout.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::SysfsLayout;

void Write(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  ::close(fd);
}

void Mkdir(const std::string& path) { FUZZ_CHECK(fabric::MkdirAll(path).ok()); }

struct Tree {
  std::string root;  // holds sys/ (dev/ does not exist: no device-node check)
  fabric::HostPaths paths;
  std::string scratch;  // the single-file readers' file
  std::string pci;      // the PCI function's directory
};

std::string g_root;  // removed at exit (libFuzzer exits normally at -max_total_time)

void RemoveTree() {
  ::nftw(
      g_root.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

// One mlx5-like device with a PCI parent and one port; made once per process.
const Tree& GetTree() {
  static const Tree* tree = [] {
    auto* t = new Tree;
    // tmpfs when there is one: ext4 starts writeback on every close of a
    // truncated file, which costs more than the parsing.
    std::string tmpl = fabric::IsDirectory("/dev/shm") ? "/dev/shm" : "/tmp";
    tmpl += "/fabric-sysfs-fuzz.XXXXXX";
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    t->root = tmpl;
    g_root = t->root;
    std::atexit(RemoveTree);
    t->paths.sysfs_root = t->root + "/sys";
    t->paths.dev_root = t->root + "/dev";
    t->scratch = t->root + "/scratch";
    const SysfsLayout layout(t->paths);
    t->pci = t->paths.sysfs_root + "/devices/pci0000:00/0000:3b:00.0";
    Mkdir(t->pci + "/net/eth0");
    Mkdir(layout.PortDir("mlx5_0", 1));
    FUZZ_CHECK(::symlink(t->pci.c_str(), layout.PciFunctionLink("mlx5_0").c_str()) == 0);
    Mkdir(layout.VerbsNodeDir("uverbs0"));
    Mkdir(layout.RdmaCmDir());
    return t;
  }();
  return *tree;
}

void CheckQuoted(const std::string& q) {
  FUZZ_CHECK(q.size() <= 2 + 4 * 64 + 32);
  for (char c : q) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
}

void CheckError(const absl::Status& s) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  for (char c : s.message()) FUZZ_CHECK(c != '\n' && c != '\r');
}

void SingleFileReaders(const std::string& content, const std::string& scratch) {
  CheckQuoted(fabric::QuoteContent(content));
  Write(scratch, content);

  uint64_t counter = 0;
  const bool counter_ok = fabric::ParseCounterText(content, &counter);
  absl::StatusOr<uint64_t> u64 = fabric::ReadU64(scratch);
  fabric::CounterFile file(scratch);
  absl::StatusOr<uint64_t> kept = file.Read();
  FUZZ_CHECK(counter_ok == u64.ok() && counter_ok == kept.ok());
  if (counter_ok) {
    FUZZ_CHECK(*u64 == counter && *kept == counter);
    uint64_t again = 0;
    FUZZ_CHECK(fabric::ParseCounterText(absl::StrCat(counter, "\n"), &again) && again == counter);
  } else {
    CheckError(u64.status());
    CheckError(kept.status());
  }

  if (absl::StatusOr<int64_t> v = fabric::ReadInt(scratch); v.ok()) {
    Write(scratch, absl::StrCat(*v, "\n"));
    absl::StatusOr<int64_t> again = fabric::ReadInt(scratch);
    FUZZ_CHECK(again.ok() && *again == *v);
    Write(scratch, content);
  } else {
    CheckError(v.status());
  }
  if (absl::StatusOr<uint32_t> v = fabric::ReadHex(scratch); v.ok()) {
    Write(scratch, absl::StrFormat("0x%04x\n", *v));
    absl::StatusOr<uint32_t> again = fabric::ReadHex(scratch);
    FUZZ_CHECK(again.ok() && *again == *v);
    Write(scratch, content);
  } else {
    CheckError(v.status());
  }
  if (auto v = fabric::ReadDevNumbers(scratch); v.ok()) {
    Write(scratch, absl::StrCat(v->first, ":", v->second, "\n"));
    auto again = fabric::ReadDevNumbers(scratch);
    FUZZ_CHECK(again.ok() && *again == *v);
  } else {
    CheckError(v.status());
  }

  int code = 0;
  std::string name;
  if (fabric::ParseNumberedState(content, &code, &name)) {
    int code2 = 0;
    std::string name2;
    FUZZ_CHECK(fabric::ParseNumberedState(absl::StrCat(code, ": ", name), &code2, &name2));
    FUZZ_CHECK(code2 == code && name2 == name);
  }
}

void Discovery(FuzzedDataProvider& fdp, const Tree& t) {
  const SysfsLayout layout(t.paths);
  const std::string dev_dir = layout.DeviceDir("mlx5_0");
  const std::string port = layout.PortDir("mlx5_0", 1);
  const std::string verbs = layout.VerbsNodeDir("uverbs0");
  for (const std::string& path :
       {verbs + "/ibdev", verbs + "/dev", t.pci + "/vendor", t.pci + "/device",
        t.pci + "/numa_node", t.pci + "/sriov_numvfs", port + "/state", port + "/phys_state",
        port + "/link_layer", port + "/rate", dev_dir + "/node_guid",
        layout.RdmaCmDir() + "/dev"}) {
    Write(path, fdp.ConsumeRandomLengthString(64));
  }
  absl::StatusOr<fabric::NodeInventory> inv = fabric::DiscoverNode(t.paths);
  if (!inv.ok()) std::fprintf(stderr, "DiscoverNode: %s\n", inv.status().ToString().c_str());
  FUZZ_CHECK(inv.ok());
  FUZZ_CHECK(inv->devices.size() + inv->skipped.size() <= 1);
  FUZZ_CHECK(inv->skipped.size() <= inv->warnings.size());
  for (const std::string& w : inv->warnings) {
    if (w.find('\n') != std::string::npos) std::fprintf(stderr, "warning: %s\n", w.c_str());
    FUZZ_CHECK(w.find('\n') == std::string::npos);  // one log line each
  }
  for (const fabric::RdmaDevice& d : inv->devices) {
    FUZZ_CHECK(d.name == "mlx5_0");
    FUZZ_CHECK(!d.ports.empty());
    FUZZ_CHECK(d.pci.has_value());
    FUZZ_CHECK(d.pci->numa_node >= -1);
    FUZZ_CHECK(d.pci->sriov_numvfs >= 0);
    for (const fabric::PortInfo& p : d.ports) {
      int code = 0;
      std::string name;
      FUZZ_CHECK(
          fabric::ParseNumberedState(absl::StrCat(p.state_code, ": ", p.state), &code, &name) &&
          code == p.state_code && name == p.state);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    fabric::SetLogLevel(fabric::LogLevel::kError);  // skipped devices warn
    return true;
  }();
  (void)quiet;
  const Tree& t = GetTree();
  FuzzedDataProvider fdp(data, size);
  SingleFileReaders(fdp.ConsumeRandomLengthString(256), t.scratch);
  Discovery(fdp, t);
  return 0;
}
