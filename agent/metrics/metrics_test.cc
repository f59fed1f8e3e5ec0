#include "agent/metrics/metrics.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "agent/base/utf8.h"
#include "agent/health/health_monitor.h"
#include "agent/sampler/sampler.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

MetricsInput Input(const testing::FakeSysfs& fs) {
  auto inv = DiscoverNode(fs.paths());
  EXPECT_OK(inv);
  MetricsInput in;
  in.version = "test";
  in.devices = inv->devices;
  for (const auto& d : in.devices) in.health[d.name] = DeviceHealth{};
  // The counters as the sampler reads them: one read of the tree, now.
  in.sample = sampler::SampleCountersOnce(fs.paths(), in.devices);
  return in;
}

TEST(MetricsTest, CountersPortsHealthAndPodLabels) {
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddMlx5("mlx5_0", "0000:3b:00.0",
             {.numa_node = 1, .link_layer = "Ethernet", .netdev = "eth2"});
  fs.SetCounter("rdmap79s0", 1, "tx_bytes", 123456);
  fs.SetCounter("rdmap79s0", 0, "cmds_err", 2);
  fs.SetPmaCounter("mlx5_0", 1, "port_xmit_data", 1000);
  fs.SetPortState("mlx5_0", 1, "1: DOWN", "3: Disabled");
  MetricsInput in = Input(fs);
  in.health["mlx5_0"] = DeviceHealth{false, "port 1 DOWN/Disabled", HealthCause::kPortDown};
  in.holds.push_back({"kv", "member-0", "store", "vpc.amazonaws.com/efa", "rdmap79s0"});
  PoolMetrics p;
  p.resource = "vpc.amazonaws.com/efa";
  p.mode = "exclusive";
  p.units = 1;
  p.healthy_units = 1;
  p.allocated_units = 1;
  p.registered = true;
  p.registration_mode = "kubelet";
  in.pools.push_back(p);

  const std::string text = RenderMetrics(in);
  EXPECT_THAT(
      text,
      HasSubstr(
          "fabric_hw_stat_total{device=\"rdmap79s0\",port=\"1\",counter=\"tx_bytes\"} 123456\n"));
  EXPECT_THAT(
      text,
      HasSubstr("fabric_hw_stat_total{device=\"rdmap79s0\",port=\"0\",counter=\"cmds_err\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("counter=\"lifespan\"")));
  // PMA data counters count 4-byte words.
  EXPECT_THAT(
      text,
      HasSubstr(
          "fabric_port_data_bytes_total{device=\"mlx5_0\",port=\"1\",direction=\"xmit\"} 4000\n"));
  EXPECT_THAT(text, HasSubstr("fabric_port_active{device=\"mlx5_0\",port=\"1\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("fabric_device_healthy{device=\"mlx5_0\",reason=\"port_down\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("fabric_device_healthy{device=\"rdmap79s0\",reason=\"\"} 1\n"));
  EXPECT_THAT(
      text,
      HasSubstr("fabric_pod_hw_stat_total{namespace=\"kv\",pod=\"member-0\",container=\"store\","
                "device=\"rdmap79s0\",port=\"1\",counter=\"tx_bytes\"} 123456\n"));
  EXPECT_THAT(text, HasSubstr("kind=\"efa\",pci=\"0000:4f:00.0\",driver=\"efa\",numa_node=\"0\""));
  EXPECT_THAT(text, HasSubstr("fabric_allocate_duration_seconds_bucket{resource=\"vpc.amazonaws."
                              "com/efa\",le=\"+Inf\"} 0\n"));
  // The mlx5 device is not held: no Pod series for it.
  EXPECT_THAT(text, Not(HasSubstr("pod=\"member-0\",container=\"store\",device=\"mlx5_0\"")));
}

// Issue 11 item 6: the reason label is a small fixed set. Health verdicts come
// from the real monitor; each EFA error-counter growth has its own detail
// ("cmds_err grew by 5"), and none of it may reach a label value.
TEST(MetricsTest, HealthReasonLabelIsBoundedWhateverTheDetail) {
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  fs.SetCounter("rdmap79s0", 0, "cmds_err", 0);
  HealthConfig cfg;
  cfg.efa.error_counters = {{"cmds_err", 1}};
  cfg.efa.check_interval_ms = 1000;
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  sampler::SamplerInputs sampled;
  sampled.devices = [&] { return inv->devices; };
  sampler::SamplerOptions so;
  so.paths = fs.paths();
  sampler::Sampler counters(so, sampled, nullptr, nullptr);
  HealthMonitor monitor(
      fs.paths(), cfg, [&] { return counters.Latest(); }, [](const NodeInventory&, const auto&) {});
  absl::Time t = absl::FromUnixSeconds(1000000);
  counters.TakeNow();
  monitor.Prime(*inv, t);
  const std::set<std::string> allowed = {"", "port_down", "error_counters", "device_removed",
                                         "other"};
  const std::regex healthy_re("^fabric_device_healthy\\{device=\"([^\"]*)\",reason=\"([^\"]*)\"\\}",
                              std::regex::multiline);
  std::set<std::string> series;
  uint64_t cmds_err = 0;
  for (uint64_t growth : {5, 7, 1234}) {
    fs.SetCounter("rdmap79s0", 0, "cmds_err", cmds_err += growth);
    fs.SetPortState("mlx5_0", 1, growth == 7 ? "1: DOWN" : "2: INIT", "3: Disabled");
    t += absl::Seconds(2);
    counters.TakeNow();
    monitor.Tick(t);
    MetricsInput in = Input(fs);
    in.health = monitor.health();
    ASSERT_FALSE(in.health["rdmap79s0"].healthy);
    EXPECT_THAT(in.health["rdmap79s0"].reason, HasSubstr(absl::StrCat(growth)));  // detail kept
    const std::string text = RenderMetrics(in);
    for (std::sregex_iterator it(text.begin(), text.end(), healthy_re), end; it != end; ++it) {
      EXPECT_TRUE(allowed.count((*it)[2])) << "unbounded reason label: " << (*it)[2];
      series.insert((*it)[1].str() + "/" + (*it)[2].str());
    }
  }
  EXPECT_EQ(series, (std::set<std::string>{"mlx5_0/port_down", "rdmap79s0/error_counters"}));
}

TEST(MetricsTest, RemovedAndUnclassifiedCausesHaveFixedLabels) {
  EXPECT_EQ((DeviceHealth{false, "device removed", HealthCause::kRemoved}).CauseLabel(),
            "device_removed");
  EXPECT_EQ((DeviceHealth{false, "anything 42"}).CauseLabel(), "other");
  EXPECT_EQ(DeviceHealth{}.CauseLabel(), "");
}

class CountingFiles : public CounterFiles {
 public:
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    lists++;
    return CounterFiles::List(dir);
  }
  int Open(const std::string& path) override {
    opens++;
    return CounterFiles::Open(path);
  }
  ssize_t Read(int fd, char* buf, size_t size) override {
    reads++;
    return CounterFiles::Read(fd, buf, size);
  }
  int opens = 0, lists = 0, reads = 0;
};

// Issue 13: a render used to open ~1,100 sysfs files at 32 devices. Issue 17:
// the sampler is the one reader of counter files, so a render does no counter
// I/O at all: it shows the latest sample, and a change in the files shows
// with the next sample. Not timed: it counts through the seam.
TEST(MetricsRendererTest, RenderDoesNoCounterIoAfterASample) {
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {.numa_node = 0});
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  fs.SetCounter("rdmap79s0", 1, "tx_bytes", 100);
  fs.SetPmaCounter("mlx5_0", 1, "port_xmit_data", 10);
  MetricsInput in = Input(fs);
  in.holds.push_back({"ns", "p", "c", "r.io/x", "rdmap79s0"});
  const std::string one_shot = RenderMetrics(in);
  CountingFiles files;
  sampler::SamplerOptions so;
  so.paths = fs.paths();
  so.files = &files;
  sampler::SamplerInputs si;
  si.devices = [&] { return in.devices; };
  sampler::Sampler sampler(so, si, nullptr, nullptr);
  in.sample = sampler.TakeNow();
  // Every counter file opened and read once by the sample; nothing else.
  size_t counter_lines = 0;
  const std::string first = RenderMetrics(in);
  EXPECT_EQ(first, one_shot);  // same text as from a one-shot read
  for (const char* family :
       {"fabric_hw_stat_total{", "fabric_port_data_bytes_total{", "fabric_pma_stat_total{"}) {
    for (size_t pos = 0; (pos = first.find(std::string("\n") + family, pos)) != std::string::npos;
         ++pos) {
      ++counter_lines;
    }
  }
  ASSERT_GT(counter_lines, 0u);
  EXPECT_EQ(static_cast<size_t>(files.opens), counter_lines);
  EXPECT_EQ(static_cast<size_t>(files.reads), counter_lines);

  files.opens = files.lists = files.reads = 0;
  fs.SetCounter("rdmap79s0", 1, "tx_bytes", 4242);
  fs.SetPmaCounter("mlx5_0", 1, "port_xmit_data", 11);
  for (int i = 0; i < 3; ++i) {
    const std::string text = RenderMetrics(in);
    EXPECT_THAT(text, HasSubstr("device=\"rdmap79s0\",port=\"1\",counter=\"tx_bytes\"} 100\n"))
        << "the sample's value, not the file's";
  }
  EXPECT_EQ(files.opens + files.lists + files.reads, 0);
  in.sample = sampler.TakeNow();
  const std::string text = RenderMetrics(in);
  EXPECT_THAT(text, HasSubstr("device=\"rdmap79s0\",port=\"1\",counter=\"tx_bytes\"} 4242\n"));
  EXPECT_THAT(text, HasSubstr("device=\"mlx5_0\",port=\"1\",direction=\"xmit\"} 44\n"));
  EXPECT_EQ(files.opens, 0);
  EXPECT_EQ(static_cast<size_t>(files.reads), counter_lines);
}

void ExpectParsableScrape(const std::string& text);

// The sampler's own series, only where a sampler runs.
TEST(MetricsTest, SamplerSeries) {
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  MetricsInput in = Input(fs);
  EXPECT_THAT(RenderMetrics(in), Not(HasSubstr("fabric_sampler_")));
  in.sampler = SamplerMetrics{7, 0.0025, 1.5, 1, 1234567};
  const std::string text = RenderMetrics(in);
  EXPECT_THAT(text, HasSubstr("# TYPE fabric_sampler_rounds_total counter\n"
                              "fabric_sampler_rounds_total 7\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE fabric_sampler_round_seconds gauge\n"
                              "fabric_sampler_round_seconds 0.0025\n"));
  EXPECT_THAT(text, HasSubstr("fabric_sampler_last_sample_age_seconds 1.5\n"));
  EXPECT_THAT(text, HasSubstr("fabric_sampler_unreadable_devices 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE fabric_sampler_ring_bytes gauge\n"
                              "fabric_sampler_ring_bytes 1234567\n"));
  ExpectParsableScrape(text);
}

TEST(MetricsRendererTest, DescriptorsOfDevicesNoLongerRenderedAreClosed) {
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {.numa_node = 0});
  MetricsInput in = Input(fs);
  CounterReader reader(fs.paths());
  std::vector<CounterValue> hw, pma;
  for (const auto& d : in.devices) reader.Read(d, &hw, &pma);
  const size_t both = reader.open_descriptors();
  ASSERT_GT(both, 0u);
  reader.Retain({"rdmap79s0"});
  EXPECT_EQ(reader.open_descriptors() * 2, both);
  // A device whose identity changed (re-created: new verbs node) is listed again.
  RdmaDevice moved = in.devices[0];
  moved.uverbs.rel_path = "infiniband/uverbs9";
  CountingFiles files;
  CounterReader counting(fs.paths(), &files);
  counting.Read(in.devices[0], &hw, &pma);
  const int opens = files.opens;
  counting.Read(in.devices[0], &hw, &pma);
  EXPECT_EQ(files.opens, opens);
  counting.Read(moved, &hw, &pma);
  EXPECT_EQ(files.opens, 2 * opens);
}

// Checks the text format line by line: every sample line is
// name{label="value",...} number, every label value is valid UTF-8 with only
// the format's escapes. The promtool check below is the reference parser.
void ExpectParsableScrape(const std::string& text) {
  ASSERT_TRUE(IsValidUtf8(text));
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t i = line.find_first_of("{ ");
    ASSERT_NE(i, std::string::npos) << line;
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        ASSERT_NE(eq, std::string::npos) << line;
        for (i = eq + 2; line[i] != '"'; ++i) {
          ASSERT_LT(i, line.size()) << line;
          const auto c = static_cast<unsigned char>(line[i]);
          ASSERT_FALSE(c < 0x20 || c == 0x7f) << line;
          if (c == '\\') {
            ++i;
            ASSERT_TRUE(line[i] == '\\' || line[i] == '"' || line[i] == 'n') << line;
          }
        }
        ++i;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    ASSERT_EQ(line[i], ' ') << line;
    uint64_t v;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(i + 1), &v) ||
                line.substr(i + 1).find_first_not_of("0123456789.e+-") == std::string::npos)
        << line;
  }
}

// A netdev or RDMA device renamed to bytes that are not UTF-8, a counter file
// with such a name, a Pod name with quotes and newlines: the scrape still
// parses. (Before: raw bytes in a label value, and Prometheus rejects the
// whole scrape.)
TEST(MetricsTest, AnyLabelBytesGiveAParsableScrape) {
  testing::FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "eth2"});
  fs.SetCounter("mlx5_0", 1,
                "rx\xc0"
                "bytes",
                7);
  MetricsInput in = Input(fs);
  ASSERT_EQ(in.devices.size(), 1u);
  in.devices[0].netdevs = {"eth\xff\xfe"};
  for (PortInfo& p : in.devices[0].ports) p.netdev = "eth\xff\xfe";
  RdmaDevice odd = in.devices[0];
  odd.name = std::string("mlx5_\x80\"\\\n\r\0x", 11);
  odd.netdevs = {"\xf0\x28\x8c\x28"};
  in.devices.push_back(odd);
  in.health[odd.name] = DeviceHealth{};
  in.holds.push_back({"kv\xff", "pod\"}\n# HELP", "c\\", "vpc.amazonaws.com/efa", odd.name});
  const std::string text = RenderMetrics(in);
  EXPECT_THAT(text, HasSubstr("netdev=\"eth\xEF\xBF\xBD\xEF\xBF\xBD\""));
  EXPECT_THAT(text, HasSubstr("pod=\"pod\\\"}\\n# HELP\""));
  ExpectParsableScrape(text);

  // The reference parser, where installed (tools/test.sh installs it).
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "no promtool";
  testing::TempDir dir;
  const std::string file = dir.path() + "/scrape.txt";
  std::ofstream(file) << text;
  const std::string cmd = "/usr/bin/promtool check metrics < " + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  pclose(p);
  // Lint remarks (naming advice) are fine; a parse error is not.
  EXPECT_THAT(out, Not(HasSubstr("parsing error"))) << out;
  EXPECT_THAT(out, Not(HasSubstr("error while linting"))) << out;
}

// Issue 32, item 12: a grant's GID index that no longer names its GID.
TEST(MetricsTest, GidIndexStalePerContainerAndPort) {
  testing::FakeSysfs fs;
  fs.AddRxe("rxe0", "eth0");
  MetricsInput in = Input(fs);
  in.gid_index_stale.push_back({{"ml", "p1", "engine", "r.io/x", "rxe0"}, 1, true});
  in.gid_index_stale.push_back({{"ml", "p2", "engine", "r.io/x", "rxe0"}, 1, false});
  const std::string text = RenderMetrics(in);
  EXPECT_THAT(text, HasSubstr("# TYPE fabric_pod_gid_index_stale gauge\n"));
  EXPECT_THAT(text, HasSubstr("fabric_pod_gid_index_stale{namespace=\"ml\",pod=\"p1\",container="
                              "\"engine\",device=\"rxe0\",port=\"1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("fabric_pod_gid_index_stale{namespace=\"ml\",pod=\"p2\",container="
                              "\"engine\",device=\"rxe0\",port=\"1\"} 0\n"));
}

// Pins metric names, types and label names: a rename breaks dashboards, so
// it must be a deliberate change of test/testdata/metrics_golden.txt.
TEST(MetricsTest, GoldenNamesTypesAndLabels) {
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  MetricsInput in = Input(fs);
  in.holds.push_back({"ns", "p", "c", "r.io/x", "rdmap79s0"});
  in.holds.push_back({"ns", "p", "c", "r.io/x", "mlx5_0"});
  in.gid_index_stale.push_back({{"ns", "p", "c", "r.io/x", "mlx5_0"}, 1, true});
  PoolMetrics p;
  p.resource = "r.io/x";
  in.pools.push_back(p);
  const std::string text = RenderMetrics(in);

  std::map<std::string, std::string> types;
  std::map<std::string, std::set<std::string>> labels;
  std::istringstream lines(text);
  std::string line;
  std::regex type_re("^# TYPE (\\S+) (\\S+)$");
  std::regex sample_re("^([a-z_]+)(\\{(.*)\\})? \\S+$");
  std::regex label_re("([a-z_]+)=\"");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, m, type_re)) {
      types[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample_re)) {
      std::string name = m[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string s = suffix;
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
            types.count(name.substr(0, name.size() - s.size()))) {
          name = name.substr(0, name.size() - s.size());
        }
      }
      std::string ls = m[3];
      for (std::sregex_iterator it(ls.begin(), ls.end(), label_re), end; it != end; ++it) {
        labels[name].insert((*it)[1]);
      }
    }
  }
  std::string got;
  for (const auto& [name, type] : types) {
    got += name + " " + type;
    for (const auto& l : labels[name]) got += " " + l;
    got += "\n";
  }
  const std::string golden_path = testing::TestDataDir() + "/metrics_golden.txt";
  std::ifstream golden_file(golden_path);
  std::stringstream golden;
  golden << golden_file.rdbuf();
  EXPECT_EQ(got, golden.str()) << "update " << golden_path << " if the change is deliberate:\n"
                               << got;
}

TEST(LatencyHistogramTest, CumulativeBuckets) {
  LatencyHistogram h;
  h.Observe(0.00005);
  h.Observe(0.003);
  h.Observe(5);
  auto s = h.Read();
  EXPECT_EQ(s.count, 3u);
  EXPECT_EQ(s.cumulative[0], 1u);      // <= 100us
  EXPECT_EQ(s.cumulative[5], 2u);      // <= 5ms
  EXPECT_EQ(s.cumulative.back(), 2u);  // <= 1s; the 5 s one only in +Inf
  EXPECT_NEAR(s.sum, 5.00305, 1e-6);
}

}  // namespace
}  // namespace fabric
