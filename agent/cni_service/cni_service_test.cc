#include "agent/cni_service/cni_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "absl/synchronization/notification.h"
#include "agent/base/file_util.h"
#include "agent/cni_service/cni_agent_server.h"
#include "agent/podresources/podresources_client.h"
#include "podresources/v1/api.grpc.pb.h"
#include "test/fakes/fake_rdma_netlink.h"
#include "test/testing/status_matchers.h"

namespace fabric::cni_service {
namespace {

using netns::FakeRdmaNetlink;
using netns::NetnsMode;
using podresources::PodDevices;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FakePodResources : public podresources::PodResourcesSource {
 public:
  absl::StatusOr<std::vector<PodDevices>> GetPodDevices(const std::string& ns,
                                                        const std::string& pod) override {
    if (!error.ok()) return error;
    std::vector<PodDevices> out;
    for (const auto& d : devices) {
      if (d.ns == ns && d.pod == pod) out.push_back(d);
    }
    if (out.empty() && !known.count(ns + "/" + pod)) return absl::NotFoundError("pod not found");
    return out;
  }
  absl::StatusOr<std::vector<PodDevices>> ListPodDevices() override { return devices; }

  std::vector<PodDevices> devices;
  std::set<std::string> known;
  absl::Status error;
};

class MapResolver : public DeviceResolver {
 public:
  std::optional<GrantedDevice> Resolve(const std::string& resource,
                                       const std::string& device_id) const override {
    auto it = devices.find({resource, device_id});
    if (it == devices.end()) return std::nullopt;
    return it->second;
  }
  void Add(GrantedDevice d) { devices[{d.resource, d.device_id}] = d; }
  std::map<std::pair<std::string, std::string>, GrantedDevice> devices;
};

class CniServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cnisvcXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    paths_.state_dir = dir_ + "/state";
    netns_a_ = MakeNetns("pod-a");
    netns_b_ = MakeNetns("pod-b");
    for (const char* d : {"mlx5_0", "mlx5_1", "efa0", "rxe0"}) rdma_.AddDevice(d);
    rdma_.RefuseMoves("efa0");
    resolver_.Add({"fabric.io/rdma", "0000:01:00.0", "mlx5_0", true, false});
    resolver_.Add({"fabric.io/rdma", "0000:01:00.1", "mlx5_1", true, false});
    resolver_.Add({"fabric.io/efa", "efa0", "efa0", true, true});
    resolver_.Add({"fabric.io/rdma-shared", "rxe0-3", "rxe0", false, false});
    pods_.devices = {
        {"ns", "pod-a", "main", "fabric.io/rdma", {"0000:01:00.0"}},
        {"ns", "pod-a", "main", "nvidia.com/gpu", {"GPU-1"}},  // not ours
        {"ns", "pod-b", "main", "fabric.io/rdma", {"0000:01:00.1"}},
        {"ns", "pod-efa", "main", "fabric.io/efa", {"efa0"}},
        {"ns", "pod-efa", "side", "fabric.io/rdma-shared", {"rxe0-3"}},
    };
    pods_.known = {"ns/plain"};
    service_ = NewService();
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Plain files stand in for network namespaces here; the real check (nsfs)
  // has its own tests below.
  std::unique_ptr<CniService> NewService() {
    auto s = std::make_unique<CniService>(paths_, &pods_, &resolver_, &rdma_);
    s->SetNetnsCheckForTest([](const std::string& p) {
      return PathExists(p) ? absl::OkStatus() : absl::NotFoundError(p);
    });
    return s;
  }

  // A stand-in netns path: the service only needs it to exist.
  std::string MakeNetns(const std::string& name) {
    std::string p = dir_ + "/netns-" + name;
    std::ofstream(p) << "";
    return p;
  }

  agentpb::CniRequest Req(const std::string& pod, const std::string& netns,
                          const std::string& cid = "") {
    agentpb::CniRequest r;
    r.set_container_id(cid.empty() ? "cid-" + pod : cid);
    r.set_netns(netns);
    r.set_ifname("eth0");
    r.set_pod_namespace("ns");
    r.set_pod_name(pod);
    r.set_network_name("fabric-net");
    r.set_cni_version("1.0.0");
    return r;
  }

  size_t StateFiles() {
    auto names = ListDir(paths_.state_dir + "/cni");
    return names.ok() ? names->size() : 0;
  }

  std::string dir_, netns_a_, netns_b_;
  HostPaths paths_;
  FakePodResources pods_;
  MapResolver resolver_;
  FakeRdmaNetlink rdma_;
  std::unique_ptr<CniService> service_;
};

TEST_F(CniServiceTest, SharedModeRecordsAttributionAndChangesNothing) {
  auto resp = service_->Add(Req("pod-a", netns_a_));
  ASSERT_OK(resp.status());
  ASSERT_EQ(resp->devices_size(), 1);
  EXPECT_EQ(resp->devices(0).rdma_device(), "mlx5_0");
  EXPECT_EQ(resp->devices(0).action(), agentpb::DeviceAttachment::ATTRIBUTED);
  EXPECT_EQ(resp->netns_mode(), "shared");
  EXPECT_TRUE(rdma_.moves().empty());
  EXPECT_EQ(StateFiles(), 1u);
  auto all = service_->Attachments();
  ASSERT_OK(all.status());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].pod_name, "pod-a");
  ASSERT_OK(service_->Del(Req("pod-a", netns_a_)).status());
  EXPECT_EQ(StateFiles(), 0u);
}

TEST_F(CniServiceTest, ExclusiveModeMovesDeviceAndRecordsIt) {
  rdma_.SetMode(NetnsMode::kExclusive);
  auto resp = service_->Add(Req("pod-a", netns_a_));
  ASSERT_OK(resp.status());
  ASSERT_EQ(resp->devices_size(), 1);
  EXPECT_EQ(resp->devices(0).action(), agentpb::DeviceAttachment::MOVED);
  EXPECT_EQ(rdma_.Location("mlx5_0"), netns_a_);
  EXPECT_EQ(rdma_.Location("mlx5_1"), "");  // other Pod's device untouched
  auto rec = AttachmentStore(paths_.state_dir + "/cni").Load({"fabric-net", "cid-pod-a", "eth0"});
  ASSERT_OK(rec.status());
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->netns, netns_a_);
  EXPECT_EQ((*rec)->devices[0].action, DeviceAction::kMoved);
  // A retried ADD is idempotent: no second move.
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  EXPECT_EQ(rdma_.moves().size(), 1u);
  EXPECT_OK(service_->Check(Req("pod-a", netns_a_)).status());
}

TEST_F(CniServiceTest, EfaAndSharedTokensAreNotMovedButReported) {
  rdma_.SetMode(NetnsMode::kExclusive);
  auto resp = service_->Add(Req("pod-efa", netns_a_));
  ASSERT_OK(resp.status());
  ASSERT_EQ(resp->devices_size(), 2);
  EXPECT_EQ(resp->devices(0).action(), agentpb::DeviceAttachment::NOT_MOVED_EFA);
  EXPECT_EQ(resp->devices(1).action(), agentpb::DeviceAttachment::NOT_MOVED_SHARED_TOKEN);
  ASSERT_EQ(resp->warnings_size(), 2);
  EXPECT_THAT(resp->warnings(0), HasSubstr("efa0"));
  EXPECT_THAT(resp->warnings(0), HasSubstr("shared mode"));
  EXPECT_THAT(resp->warnings(1), HasSubstr("rxe0"));
  EXPECT_TRUE(rdma_.moves().empty());
  EXPECT_EQ(rdma_.Location("efa0"), "");
  // ... and kept in the agent's state.
  auto all = service_->Attachments();
  ASSERT_OK(all.status());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].warnings.size(), 2u);
  EXPECT_EQ((*all)[0].devices[0].action, DeviceAction::kNotMovedEfa);
}

TEST_F(CniServiceTest, KernelRefusalFailsAddNamingDeviceAndRollsBack) {
  rdma_.SetMode(NetnsMode::kExclusive);
  pods_.devices.push_back(
      {"ns", "pod-two", "main", "fabric.io/rdma", {"0000:01:00.0", "0000:01:00.1"}});
  rdma_.RefuseMoves("mlx5_1");
  auto resp = service_->Add(Req("pod-two", netns_a_));
  EXPECT_THAT(resp, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(resp.status().message()), HasSubstr("mlx5_1"));
  EXPECT_EQ(rdma_.Location("mlx5_0"), "");  // rolled back
  EXPECT_EQ(StateFiles(), 0u);
}

TEST_F(CniServiceTest, DelMovesBackAndIsIdempotent) {
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  ASSERT_OK(service_->Del(Req("pod-a", netns_a_)).status());
  EXPECT_EQ(rdma_.Location("mlx5_0"), "");
  EXPECT_THAT(rdma_.moves().back(), (FakeRdmaNetlink::Move{"mlx5_0", netns_a_, ""}));
  EXPECT_EQ(StateFiles(), 0u);
  ASSERT_OK(service_->Del(Req("pod-a", netns_a_)).status());
  ASSERT_OK(service_->Del(Req("never-added", "")).status());
  EXPECT_EQ(rdma_.moves().size(), 2u);
}

TEST_F(CniServiceTest, DelSurvivesAgentRestart) {
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  service_ = NewService();
  ASSERT_OK(service_->Del(Req("pod-a", "")).status());  // CNI_NETNS may be empty on DEL
  EXPECT_EQ(rdma_.Location("mlx5_0"), "");
}

TEST_F(CniServiceTest, DelForGonePodSucceedsAndGcFinishes) {
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  ::unlink(netns_a_.c_str());  // Pod netns gone, kernel has not returned the device yet
  auto resp = service_->Del(Req("pod-a", ""));
  ASSERT_OK(resp.status());
  ASSERT_EQ(resp->warnings_size(), 1);
  EXPECT_THAT(resp->warnings(0), HasSubstr("GC"));
  EXPECT_EQ(StateFiles(), 1u);  // kept for GC
  rdma_.DestroyNetns(netns_a_);
  agentpb::GcRequest gc;
  gc.set_network_name("fabric-net");
  auto gc_resp = service_->Gc(gc);
  ASSERT_OK(gc_resp.status());
  EXPECT_EQ(gc_resp->released(), 1u);
  EXPECT_EQ(StateFiles(), 0u);
}

TEST_F(CniServiceTest, ReconcileReleasesOnlyRecordsWhoseNetnsIsGone) {
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());  // shared mode: attribution
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-b", netns_b_)).status());
  // DEL never reached the agent; the sandbox went away and the kernel
  // returned the device.
  ::unlink(netns_b_.c_str());
  rdma_.DestroyNetns(netns_b_);
  auto released = service_->ReconcileGoneNetns();
  ASSERT_OK(released.status());
  EXPECT_EQ(*released, 1);
  auto left = service_->Attachments();
  ASSERT_OK(left.status());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].pod_name, "pod-a");
}

TEST_F(CniServiceTest, GcReleasesOnlyStaleAttachmentsOfItsNetwork) {
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  ASSERT_OK(service_->Add(Req("pod-b", netns_b_)).status());
  auto other = Req("pod-efa", netns_b_);
  other.set_network_name("other-net");
  ASSERT_OK(service_->Add(other).status());
  agentpb::GcRequest gc;
  gc.set_network_name("fabric-net");
  auto* valid = gc.add_valid_attachments();
  valid->set_container_id("cid-pod-a");
  valid->set_ifname("eth0");
  auto resp = service_->Gc(gc);
  ASSERT_OK(resp.status());
  EXPECT_EQ(resp->released(), 1u);
  EXPECT_EQ(rdma_.Location("mlx5_0"), netns_a_);  // valid: untouched
  EXPECT_EQ(rdma_.Location("mlx5_1"), "");        // stale: moved back
  EXPECT_EQ(StateFiles(), 2u);                    // pod-a + other-net's record
}

TEST_F(CniServiceTest, CheckReportsDeviceNotWhereItShouldBe) {
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  ASSERT_OK(rdma_.MoveDevice("mlx5_0", netns_a_, ""));  // someone moved it back
  auto resp = service_->Check(Req("pod-a", netns_a_));
  EXPECT_THAT(resp, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(resp.status().message()), HasSubstr("mlx5_0"));
}

TEST_F(CniServiceTest, CheckWithoutAddRecordFailsForMovablePod) {
  rdma_.SetMode(NetnsMode::kExclusive);
  EXPECT_THAT(service_->Check(Req("pod-a", netns_a_)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_OK(service_->Check(Req("plain", netns_a_)).status());
}

TEST_F(CniServiceTest, CheckNoticesModeSwitchedToShared) {
  rdma_.SetMode(NetnsMode::kExclusive);
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  rdma_.SetMode(NetnsMode::kShared);
  EXPECT_THAT(service_->Check(Req("pod-a", netns_a_)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(CniServiceTest, PodWithoutFabricDevicesPassesThrough) {
  rdma_.SetMode(NetnsMode::kExclusive);
  auto resp = service_->Add(Req("plain", netns_a_));
  ASSERT_OK(resp.status());
  EXPECT_EQ(resp->devices_size(), 0);
  EXPECT_EQ(StateFiles(), 0u);
  ASSERT_OK(service_->Add(Req("unknown-to-kubelet", netns_a_)).status());
  EXPECT_EQ(StateFiles(), 0u);
}

TEST_F(CniServiceTest, NonKubernetesInvocationIsANoOpWithWarning) {
  auto req = Req("pod-a", netns_a_);
  req.clear_pod_name();
  auto resp = service_->Add(req);
  ASSERT_OK(resp.status());
  EXPECT_EQ(resp->warnings_size(), 1);
  EXPECT_EQ(StateFiles(), 0u);
}

TEST_F(CniServiceTest, KubeletUnreachableIsUnavailable) {
  pods_.error = absl::UnavailableError("connect: no such file");
  auto resp = service_->Add(Req("pod-a", netns_a_));
  EXPECT_THAT(resp, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(resp.status().message()), HasSubstr("PodResources"));
}

TEST_F(CniServiceTest, ServerSocketIsPrivateAndDirectoryCreated) {
  CniAgentServer server(service_.get());
  std::string socket = dir_ + "/run/fabric/agent.sock";
  ASSERT_OK(server.Start(socket));
  struct stat st;
  ASSERT_EQ(::stat(socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ + "/run/fabric").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  server.Stop();
  EXPECT_FALSE(PathExists(socket));
  EXPECT_THAT(server.Start(dir_ + "/" + std::string(120, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CniServiceTest, StatusIsReadyAndNamesMode) {
  rdma_.SetMode(NetnsMode::kExclusive);
  auto s = service_->Status();
  EXPECT_TRUE(s.ready());
  EXPECT_THAT(s.message(), HasSubstr("exclusive"));
}

// Item 4 of issue 11: a Pod holding only EFA devices and shared tokens needs
// nothing moved, so a kernel without (readable) RDMA netlink must not fail its
// ADD. A Pod with a device that may have to move still needs the mode.
TEST_F(CniServiceTest, EfaAndSharedTokenPodNeedsNoRdmaNetlink) {
  rdma_.FailAll(absl::UnavailableError("open NETLINK_RDMA socket: Protocol not supported"));
  auto resp = service_->Add(Req("pod-efa", netns_a_));
  ASSERT_OK(resp.status());
  ASSERT_EQ(resp->devices_size(), 2);
  EXPECT_EQ(resp->devices(0).action(), agentpb::DeviceAttachment::NOT_MOVED_EFA);
  EXPECT_EQ(resp->devices(1).action(), agentpb::DeviceAttachment::NOT_MOVED_SHARED_TOKEN);
  EXPECT_EQ(resp->netns_mode(), "unknown");
  EXPECT_THAT(resp->warnings(0), HasSubstr("Protocol not supported"));
  EXPECT_TRUE(rdma_.moves().empty());
  EXPECT_OK(service_->Check(Req("pod-efa", netns_a_)).status());
  EXPECT_OK(service_->Del(Req("pod-efa", netns_a_)).status());
  EXPECT_EQ(StateFiles(), 0u);
  // pod-a holds an exclusive mlx5: whether to move it depends on the mode.
  EXPECT_THAT(service_->Add(Req("pod-a", netns_a_)), StatusIs(absl::StatusCode::kUnavailable));
}

// Item 8: CNI_NETNS must be a network namespace before anything opens it.
TEST_F(CniServiceTest, NetnsThatIsNotANamespaceIsRefusedBeforeMoving) {
  rdma_.SetMode(NetnsMode::kExclusive);
  CniService real(paths_, &pods_, &resolver_, &rdma_);  // default check: nsfs
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& bad : {fifo, netns_a_}) {
    auto resp = real.Add(Req("pod-a", bad));
    EXPECT_THAT(resp, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_THAT(std::string(resp.status().message()), HasSubstr("not a network namespace"));
  }
  EXPECT_TRUE(rdma_.moves().empty());
  EXPECT_EQ(StateFiles(), 0u);
  // A Pod with nothing to move is not failed over it.
  EXPECT_OK(real.Add(Req("plain", fifo)).status());
  // A real network namespace passes.
  auto ok = real.Add(Req("pod-a", "/proc/self/ns/net"));
  ASSERT_OK(ok.status());
  EXPECT_EQ(rdma_.Location("mlx5_0"), "/proc/self/ns/net");
  EXPECT_THAT(real.Check(Req("pod-a", fifo)), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Item 8: a retried ADD looks where the devices are. An ADD that recorded its
// plan and stopped before moving (agent killed) left the device in the host:
// the retry moves it instead of answering "done".
TEST_F(CniServiceTest, RetriedAddMovesDeviceTheRecordClaimsButHostStillHas) {
  rdma_.SetMode(NetnsMode::kExclusive);
  AttachmentRecord rec;
  rec.key = {"fabric-net", "cid-pod-a", "eth0"};
  rec.netns = netns_a_;
  rec.pod_namespace = "ns";
  rec.pod_name = "pod-a";
  rec.netns_mode = "exclusive";
  rec.devices.push_back(
      {"main", "fabric.io/rdma", "0000:01:00.0", "mlx5_0", DeviceAction::kMoved, "moved"});
  ASSERT_OK(AttachmentStore(paths_.state_dir + "/cni").Save(rec));
  ASSERT_EQ(rdma_.Location("mlx5_0"), "");
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  EXPECT_EQ(rdma_.Location("mlx5_0"), netns_a_);
  // Already there: nothing more moves.
  ASSERT_OK(service_->Add(Req("pod-a", netns_a_)).status());
  EXPECT_EQ(rdma_.moves().size(), 1u);
  // Somewhere else entirely: the retry fails, naming the device.
  ASSERT_OK(rdma_.MoveDevice("mlx5_0", netns_a_, netns_b_));
  auto resp = service_->Add(Req("pod-a", netns_a_));
  EXPECT_THAT(resp, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(resp.status().message()), HasSubstr("mlx5_0"));
  // A retry naming another netns than the recorded one is refused.
  EXPECT_THAT(service_->Add(Req("pod-a", netns_b_)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// A kubelet whose PodResources Get for one Pod (pod-a) answers only when the
// test says so; every other Pod is answered at once. List is counted, never
// expected: the CNI side asks for its one Pod.
class SlowKubelet final : public ::v1::PodResourcesLister::Service {
 public:
  grpc::Status Get(grpc::ServerContext*, const ::v1::GetPodResourcesRequest* req,
                   ::v1::GetPodResourcesResponse* resp) override {
    get_calls++;
    auto* pod = resp->mutable_pod_resources();
    pod->set_name(req->pod_name());
    pod->set_namespace_(req->pod_namespace());
    auto* c = pod->add_containers();
    c->set_name("main");
    auto* d = c->add_devices();
    d->set_resource_name("fabric.io/rdma");
    if (req->pod_name() == "pod-a") {
      d->add_device_ids("0000:01:00.0");
      in_slow_get.Notify();
      // Bounded only so that a regression fails instead of hanging the suite.
      released_by_test = release.WaitForNotificationWithTimeout(absl::Seconds(60));
    } else {
      d->add_device_ids("0000:01:00.1");
    }
    return grpc::Status::OK;
  }
  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse*) override {
    list_calls++;
    return grpc::Status::OK;
  }

  std::atomic<int> get_calls{0};
  std::atomic<int> list_calls{0};
  absl::Notification in_slow_get;
  absl::Notification release;
  std::atomic<bool> released_by_test{false};
};

// One Pod's slow PodResources answer must not hold up the CNI calls of other
// Pods: the lookup runs outside the service's lock. (Under the lock, pod-b's
// ADD waited for pod-a's RPC, so the test's release came only after the
// server gave up waiting.) And the CNI side asks Get for the one Pod.
TEST_F(CniServiceTest, SlowPodResourcesAnswerDoesNotBlockOtherPods) {
  SlowKubelet kubelet;
  const std::string socket = dir_ + "/kubelet.sock";
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&kubelet);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  podresources::PodResourcesClientOptions options;
  options.socket_path = socket;
  options.use_get = true;
  options.rpc_timeout = std::chrono::milliseconds(120000);
  podresources::PodResourcesClient client(options);
  CniService service(paths_, &client, &resolver_, &rdma_);
  service.SetNetnsCheckForTest([](const std::string&) { return absl::OkStatus(); });

  auto slow = std::async(std::launch::async, [&] { return service.Add(Req("pod-a", netns_a_)); });
  kubelet.in_slow_get.WaitForNotification();
  auto other = service.Add(Req("pod-b", netns_b_));  // while pod-a's Get is in flight
  auto check = service.Check(Req("pod-c", netns_b_));
  kubelet.release.Notify();
  auto first = slow.get();
  server->Shutdown();

  EXPECT_TRUE(kubelet.released_by_test) << "pod-b's ADD waited for pod-a's PodResources call";
  ASSERT_OK(other.status());
  ASSERT_EQ(other->devices_size(), 1);
  EXPECT_EQ(other->devices(0).rdma_device(), "mlx5_1");
  EXPECT_OK(check.status());
  ASSERT_OK(first.status());
  ASSERT_EQ(first->devices_size(), 1);
  EXPECT_EQ(first->devices(0).rdma_device(), "mlx5_0");
  EXPECT_EQ(kubelet.get_calls, 3);
  EXPECT_EQ(kubelet.list_calls, 0);
}

// Two ADDs of one attachment racing through the lookup: the second finds the
// record the first made, and the Pod's devices are attributed once.
TEST_F(CniServiceTest, ConcurrentAddsOfOneAttachmentRecordItOnce) {
  std::vector<std::future<absl::StatusOr<agentpb::CniResponse>>> adds;
  for (int i = 0; i < 4; ++i) {
    adds.push_back(
        std::async(std::launch::async, [&] { return service_->Add(Req("pod-a", netns_a_)); }));
  }
  for (auto& a : adds) {
    auto r = a.get();
    ASSERT_OK(r.status());
    ASSERT_EQ(r->devices_size(), 1);
    EXPECT_EQ(r->devices(0).rdma_device(), "mlx5_0");
  }
  EXPECT_EQ(StateFiles(), 1u);
}

}  // namespace
}  // namespace fabric::cni_service
