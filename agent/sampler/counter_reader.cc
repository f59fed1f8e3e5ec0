#include "agent/sampler/counter_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "agent/base/counter_file.h"
#include "agent/base/file_util.h"
#include "agent/base/mono_clock.h"
#include "agent/sysfs/sysfs_layout.h"

namespace fabric {
namespace {

std::string Identity(const RdmaDevice& dev) {
  std::string id = absl::StrCat(dev.uverbs.rel_path, "|", dev.node_guid, "|");
  for (const PortInfo& p : dev.ports) absl::StrAppend(&id, p.number, ",");
  return id;
}

}  // namespace

std::vector<CounterDir> CounterDirsOf(const HostPaths& paths, const RdmaDevice& dev) {
  const SysfsLayout layout(paths);
  std::vector<CounterDir> out;
  out.push_back({layout.DeviceHwCountersDir(dev.name), "0", false});
  for (const PortInfo& p : dev.ports) {
    const std::string port = absl::StrCat(p.number);
    out.push_back({layout.PortHwCountersDir(dev.name, p.number), port, false});
    out.push_back({layout.PortPmaCountersDir(dev.name, p.number), port, true});
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CounterFiles::List(const std::string& dir) {
  return ListDir(dir);
}

int CounterFiles::Open(const std::string& path) {
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

ssize_t CounterFiles::Read(int fd, char* buf, size_t size) { return ::pread(fd, buf, size, 0); }

CounterReader::CounterReader(HostPaths paths, CounterFiles* files, absl::Duration relist_interval)
    : paths_(std::move(paths)), relist_interval_(relist_interval) {
  if (files == nullptr) {
    owned_files_ = std::make_unique<CounterFiles>();
    files = owned_files_.get();
  }
  files_ = files;
}

CounterReader::~CounterReader() {
  for (auto& [name, d] : devices_) CloseAll(&d);
}

void CounterReader::CloseAll(Device* d) {
  for (File& f : d->files) {
    if (f.fd >= 0) {
      ::close(f.fd);
      DescriptorBudget::Get().Give();
    }
  }
  d->files.clear();
}

void CounterReader::List(const RdmaDevice& dev, Device* d) {
  CloseAll(d);
  d->identity = Identity(dev);
  d->listed_at = MonotonicNow();
  for (const CounterDir& dir : CounterDirsOf(paths_, dev)) {
    auto names = files_->List(dir.dir);
    if (!names.ok()) continue;
    for (const std::string& n : *names) {
      if (n == "lifespan") continue;  // a setting, not a counter
      File f{absl::StrCat(dir.dir, "/", n), dir.port, n, dir.pma, -1};
      if (DescriptorBudget::Get().Take()) {
        f.fd = files_->Open(f.path);
        if (f.fd < 0) {
          DescriptorBudget::Get().Give();
          continue;  // gone or unreadable: not a counter we can serve
        }
      }
      d->files.push_back(std::move(f));
    }
  }
}

absl::StatusOr<uint64_t> CounterReader::ReadOne(File& f) {
  char buf[64];
  ssize_t n;
  if (f.fd >= 0) {
    n = files_->Read(f.fd, buf, sizeof(buf));
  } else {
    int fd = files_->Open(f.path);
    if (fd < 0) return absl::NotFoundError(f.path);
    n = files_->Read(fd, buf, sizeof(buf));
    ::close(fd);
  }
  if (n < 0) return absl::UnavailableError(absl::StrCat(f.path, ": read failed"));
  uint64_t v;
  if (!ParseCounterText(absl::string_view(buf, static_cast<size_t>(n)), &v)) {
    return absl::InvalidArgumentError(absl::StrCat(f.path, ": not a counter"));
  }
  return v;
}

CounterReader::ReadResult CounterReader::Read(const RdmaDevice& dev, std::vector<CounterValue>* hw,
                                              std::vector<CounterValue>* pma) {
  Device& d = devices_[dev.name];
  const absl::Time now = MonotonicNow();  // a duration: never the wall clock
  bool listed = false;
  // Nothing listed last time (the device's counters not visible then: a
  // device in a Pod's netns, a listing that raced a driver): listed again
  // every round, three directory reads, until its counters show.
  if (d.identity != Identity(dev) || now - d.listed_at >= relist_interval_ || d.files.empty()) {
    List(dev, &d);
    listed = true;
  }
  ReadResult result;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool failed = false;
    result = ReadResult{};
    const size_t hw0 = hw->size(), pma0 = pma->size();
    for (File& f : d.files) {
      auto v = ReadOne(f);
      if (!v.ok()) {
        // A file the kernel removed (ENODEV) or one that went bad: list again.
        if (absl::IsUnavailable(v.status()) || absl::IsNotFound(v.status())) failed = true;
        if (result.failed++ == 0) result.first_error = std::string(v.status().message());
        continue;
      }
      (f.pma ? pma : hw)->push_back({f.port, f.name, *v});
      ++result.read;
    }
    if (!failed || listed) break;
    hw->resize(hw0);
    pma->resize(pma0);
    List(dev, &d);
    listed = true;
  }
  if (result.read == 0 && result.failed == 0) {
    // Nothing listed: no counter directory (a device gone, or moved into a
    // Pod's netns, where the host no longer sees it).
    result.first_error = absl::StrCat(SysfsLayout(paths_).DeviceDir(dev.name),
                                      ": no counter file (hw_counters, ports/*/counters)");
  }
  return result;
}

void CounterReader::Retain(const std::set<std::string>& live) {
  for (auto it = devices_.begin(); it != devices_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    CloseAll(&it->second);
    it = devices_.erase(it);
  }
}

size_t CounterReader::open_descriptors() const {
  size_t n = 0;
  for (const auto& [name, d] : devices_) {
    for (const File& f : d.files) n += f.fd >= 0;
  }
  return n;
}

}  // namespace fabric
