#include "agent/podprocs/cgroup_path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "test/fakes/fake_proc_tree.h"

namespace fabric::podprocs {
namespace {

using testing::CgroupStyle;
using testing::FakeContainer;
using testing::FakeProcTree;
using testing::QosClass;

struct Case {
  const char* name;
  std::string text;
  std::string pod_uid;  // empty: NotFound expected
  std::string container_id;
  std::string runtime;
};

// Lines in the formats found on real nodes (issue reports, systemd-cgls and
// /proc/<pid>/cgroup dumps; sources named per case).
std::vector<Case> RealFormats() {
  return {
      // containerd, systemd driver, cgroup v2 (kubeadm on Debian 12, Ubuntu 22.04).
      {"containerd_systemd_v2",
       "0::/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-pod55c6c714_b240_4dec_9a45_57b61696ab6e.slice/"
       "cri-containerd-2032491dcae31e6746f47daa0ac74564f2843a1bd847c5e6c4eb501ca132ac36.scope\n",
       "55c6c714-b240-4dec-9a45-57b61696ab6e",
       "2032491dcae31e6746f47daa0ac74564f2843a1bd847c5e6c4eb501ca132ac36", "containerd"},
      // A static Pod: its UID is the kubelet's md5 of the manifest (32 hex).
      {"containerd_systemd_static_pod",
       "0::/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-pod8daa50c3a64c9ff60bb9eab7b44b56fd.slice/"
       "cri-containerd-2884d57c0e100d7a9a2f9487ce0bc2986bca3430e988af7a4865aff061f51ac5.scope\n",
       "8daa50c3a64c9ff60bb9eab7b44b56fd",
       "2884d57c0e100d7a9a2f9487ce0bc2986bca3430e988af7a4865aff061f51ac5", "containerd"},
      // Guaranteed: no QoS slice.
      {"containerd_systemd_guaranteed",
       "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/"
       "cri-containerd-66be9b2efdf4d85288c319b8c1a2f50d2439b5617e36f45d9d0d0be1381113be.scope\n",
       "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
       "66be9b2efdf4d85288c319b8c1a2f50d2439b5617e36f45d9d0d0be1381113be", "containerd"},
      // CRI-O, systemd, cgroup v1 (runc issue 4620, EL8), abridged to its hierarchies.
      {"crio_systemd_v1",
       "13:freezer:/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-poda5c1f8d5_1919_434d_add7_4afaafdaef89.slice/"
       "crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c.scope\n"
       "12:cpuset:/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-poda5c1f8d5_1919_434d_add7_4afaafdaef89.slice/"
       "crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c.scope\n"
       "11:files:/\n"
       "6:pids:/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-poda5c1f8d5_1919_434d_add7_4afaafdaef89.slice/"
       "crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c.scope\n"
       "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-poda5c1f8d5_1919_434d_add7_4afaafdaef89.slice/"
       "crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c.scope\n",
       "a5c1f8d5-1919-434d-add7-4afaafdaef89",
       "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c", "cri-o"},
      // CRI-O's conmon in the Pod's slice (runc issue 4620): skipped.
      {"crio_conmon_systemd",
       "0::/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-pod207aaad1_659f_4db8_88e0_46e0cdcc3004.slice/"
       "crio-conmon-32da98c8522068be05a7510a3eddb09cad6ed2f03286180d0e931d0d0b6224a6.scope\n",
       "", "", ""},
      // conmon_cgroup = system.slice (istio issue 55139): not in a Pod at all.
      {"crio_conmon_system_slice",
       "13:hugetlb:/\n0::/system.slice/"
       "crio-conmon-c055fa05e5c1c20cc4ef3e2ebd180ab360b5369538c9b7cd536b3e6c58311b39.scope\n",
       "", "", ""},
      // CRI-O in minikube's docker node (minikube issue 11280): ancestors above kubepods.slice.
      {"crio_systemd_nested_in_docker",
       "0::/docker/d6701ec289c56e4391acb11d07474b3139466857a305490575508a8b7a9fcf22/"
       "kubepods.slice/kubepods-besteffort.slice/"
       "kubepods-besteffort-pod2ca4a155_3599_498d_bb9d_4446693fa3ea.slice/"
       "crio-0ba8ac17e4e7a31fb82279503552fe94e64bab4745bf6fd2ff231e7c8ca8bed0.scope\n",
       "2ca4a155-3599-498d-bb9d-4446693fa3ea",
       "0ba8ac17e4e7a31fb82279503552fe94e64bab4745bf6fd2ff231e7c8ca8bed0", "cri-o"},
      // Docker (dockershim / cri-dockerd), systemd (pharos-cluster issue 440).
      {"docker_systemd_v1",
       "11:cpuacct,cpu:/kubepods.slice/kubepods-besteffort.slice/"
       "kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice/"
       "docker-abddff03dfd7710c79a750ce3e730365cbb2c8247a974170c1062683bc3e9152.scope\n"
       "1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/"
       "kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice/"
       "docker-abddff03dfd7710c79a750ce3e730365cbb2c8247a974170c1062683bc3e9152.scope\n",
       "9692aa0e-748e-11e8-8dfa-76d458035df6",
       "abddff03dfd7710c79a750ce3e730365cbb2c8247a974170c1062683bc3e9152", "docker"},
      // runc's form when systemd does not manage the tree (containerd issue 5226).
      {"containerd_systemd_fallback_colon",
       "6:memory:/system.slice/containerd.service/"
       "kubepods-burstable-pod7a875b5c_4d3c_4345_ac0f_5c847d8d7129.slice:cri-containerd:"
       "ee05f876e981d258209f91f25f139f7abc13a0246a5f343298572602fea8c7bb\n",
       "7a875b5c-4d3c-4345-ac0f-5c847d8d7129",
       "ee05f876e981d258209f91f25f139f7abc13a0246a5f343298572602fea8c7bb", "containerd"},
      // cgroupfs driver, v1 (GKE/containerd, container-info fixtures).
      {"cgroupfs_v1",
       "11:devices:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/"
       "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376\n"
       "9:memory:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/"
       "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376\n"
       "1:name=systemd:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/"
       "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376\n",
       "74c13223-5a00-11e9-b385-42010a80018d",
       "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376", ""},
      // cgroupfs with a doubled kubepods (elastic apm-agent fixtures).
      {"cgroupfs_v1_kubepods_kubepods",
       "14:pids:/kubepods/kubepods/besteffort/pod0e886e9a-3879-45f9-b44d-86ef9df03224/"
       "244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4\n",
       "0e886e9a-3879-45f9-b44d-86ef9df03224",
       "244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4", ""},
      // k3s / rke2: cgroupfs, v2, Guaranteed.
      {"k3s_cgroupfs_v2_guaranteed",
       "0::/kubepods/pod03f3a69f-82ff-4368-a1aa-16ddaf74ac22/"
       "7d6d8e1e2c3f5a4b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b\n",
       "03f3a69f-82ff-4368-a1aa-16ddaf74ac22",
       "7d6d8e1e2c3f5a4b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b", ""},
      // CRI-O, cgroupfs (cri-o PR 812: crio-<id> under the Pod).
      {"crio_cgroupfs_v2",
       "0::/kubepods/burstable/pod475aa441-1968-49f8-ae50-24ce2284812c/"
       "crio-89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102\n",
       "475aa441-1968-49f8-ae50-24ce2284812c",
       "89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102", "cri-o"},
      {"crio_conmon_cgroupfs",
       "0::/kubepods/burstable/pod475aa441-1968-49f8-ae50-24ce2284812c/"
       "crio-conmon-89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102\n",
       "", "", ""},
      // kind: kubelet --cgroup-root=/kubelet, so every slice is kubelet-kubepods-*.
      {"kind_v2",
       "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
       "kubelet-kubepods-besteffort-pode1465238_4518_4c21_832f_fd9f87033dad.slice/"
       "cri-containerd-c9e786dd55a32bd886310865bcc0846c0e86e18048de28fdcc55eccabba7516b.scope\n",
       "e1465238-4518-4c21-832f-fd9f87033dad",
       "c9e786dd55a32bd886310865bcc0846c0e86e18048de28fdcc55eccabba7516b", "containerd"},
      // Seen from a reader in its own cgroup namespace (another Pod's container).
      {"relative_to_cgroupns",
       "0::/../../kubepods-besteffort-pode1465238_4518_4c21_832f_fd9f87033dad.slice/"
       "cri-containerd-d8bd1923b330e5512b4496c01f84966037642a31d66e39df9e63107225107a74.scope\n",
       "e1465238-4518-4c21-832f-fd9f87033dad",
       "d8bd1923b330e5512b4496c01f84966037642a31d66e39df9e63107225107a74", "containerd"},
      // A container of the reader's own Pod: the Pod is above the namespace root.
      {"relative_own_pod",
       "0::/../cri-containerd-d8bd1923b330e5512b4496c01f84966037642a31d66e39df9e63107225107a74."
       "scope\n",
       "", "", ""},
      // A child cgroup inside the container's (systemd in a container, DinD).
      {"nested_child_systemd",
       "0::/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-pod55c6c714_b240_4dec_9a45_57b61696ab6e.slice/"
       "cri-containerd-7bd5db88ae6e5e52e941a2709ed9c18d7572f32db6ea44e8afe783227711151a.scope/"
       "init\n",
       "55c6c714-b240-4dec-9a45-57b61696ab6e",
       "7bd5db88ae6e5e52e941a2709ed9c18d7572f32db6ea44e8afe783227711151a", "containerd"},
      {"nested_child_cgroupfs",
       "0::/kubepods/burstable/pod74c13223-5a00-11e9-b385-42010a80018d/"
       "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376/sub/deeper\n",
       "74c13223-5a00-11e9-b385-42010a80018d",
       "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376", ""},
      // The Pod's own cgroup (no container).
      {"pod_level",
       "0::/kubepods.slice/kubepods-besteffort.slice/"
       "kubepods-besteffort-pode1465238_4518_4c21_832f_fd9f87033dad.slice\n",
       "e1465238-4518-4c21-832f-fd9f87033dad", "", ""},
      // Host processes and kernel threads.
      {"host_v2_service", "0::/system.slice/containerd.service\n", "", "", ""},
      {"kernel_thread", "0::/\n", "", "", ""},
      {"this_machine_v1",
       "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n"
       "4:memory:/process_api/9773233538b6ab3b6c44f1e9727b738a\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n"
       "0::/\n",
       "", "", ""},
      {"containerd_shim_in_system_slice",
       "0::/system.slice/containerd.service/"
       "cri-containerd-2032491dcae31e6746f47daa0ac74564f2843a1bd847c5e6c4eb501ca132ac36.scope\n",
       "", "", ""},
  };
}

TEST(ParseProcCgroup, RealFormats) {
  for (const Case& c : RealFormats()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<CgroupIdentity> id = ParseProcCgroup(c.text);
    if (c.pod_uid.empty()) {
      EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound) << id.status();
      continue;
    }
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->pod_uid, c.pod_uid);
    EXPECT_EQ(id->container_id, c.container_id);
    EXPECT_EQ(id->runtime, c.runtime);
  }
}

TEST(ParseProcCgroup, FakeTreeStylesRoundTrip) {
  const CgroupStyle styles[] = {CgroupStyle::kSystemdV2,  CgroupStyle::kSystemdV1,
                                CgroupStyle::kCgroupfsV2, CgroupStyle::kCgroupfsV1,
                                CgroupStyle::kKindV2,     CgroupStyle::kNamespacedV2};
  const QosClass classes[] = {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort};
  int n = 0;
  for (CgroupStyle style : styles) {
    for (QosClass qos : classes) {
      for (const char* runtime : {"containerd", "cri-o", "docker"}) {
        ++n;
        const FakeContainer c{FakeProcTree::PodUid(n), FakeProcTree::ContainerId(n), runtime, qos};
        const std::string text = FakeProcTree::CgroupText(c, style);
        SCOPED_TRACE(text);
        absl::StatusOr<CgroupIdentity> id = ParseProcCgroup(text);
        ASSERT_TRUE(id.ok()) << id.status();
        EXPECT_EQ(id->pod_uid, c.pod_uid);
        EXPECT_EQ(id->container_id, c.container_id);
        const bool cgroupfs =
            style == CgroupStyle::kCgroupfsV1 || style == CgroupStyle::kCgroupfsV2;
        // cgroupfs names containerd's and Docker's containers by bare ID.
        EXPECT_EQ(id->runtime, cgroupfs && std::string(runtime) != "cri-o" ? "" : runtime);
      }
    }
  }
}

TEST(ParseProcCgroup, PrefersPidsThenMemoryLines) {
  const std::string a =
      "/kubepods/pod" + FakeProcTree::PodUid(1) + "/" + FakeProcTree::ContainerId(1);
  const std::string b =
      "/kubepods/pod" + FakeProcTree::PodUid(2) + "/" + FakeProcTree::ContainerId(2);
  absl::StatusOr<CgroupIdentity> id =
      ParseProcCgroup("3:devices:" + a + "\n2:pids:" + b + "\n1:memory:" + a + "\n0::/\n");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pod_uid, FakeProcTree::PodUid(2));
  id = ParseProcCgroup("3:devices:" + b + "\n1:memory:" + a + "\n");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pod_uid, FakeProcTree::PodUid(1));
  // Only an odd controller names the Pod: still the Pod.
  id = ParseProcCgroup("3:perf_event:" + b + "\n1:memory:/\n");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pod_uid, FakeProcTree::PodUid(2));
}

TEST(ParseProcCgroup, RejectsBadIds) {
  const std::string cid = FakeProcTree::ContainerId(3);
  const char* bad_uids[] = {
      "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4",    // 35
      "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d5",  // 37
      "0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D",   // upper case
      "0a1b2c3d-4e5f-4a6b-8c7d_9e0f1a2b3c4d",   // '_' in the cgroupfs form
      "0a1b2c3d44e5f-4a6b-8c7d-9e0f1a2b3c4d",   // dash moved
      "0a1b2c3g-4e5f-4a6b-8c7d-9e0f1a2b3c4d",   // not hex
      "",
  };
  for (const char* uid : bad_uids) {
    SCOPED_TRACE(uid);
    EXPECT_EQ(ParseProcCgroup("0::/kubepods/burstable/pod" + std::string(uid) + "/" + cid + "\n")
                  .status()
                  .code(),
              absl::StatusCode::kNotFound);
  }
  const std::string uid = FakeProcTree::PodUid(3);
  const std::string bad_cids[] = {cid.substr(1), cid + "0", "X" + cid.substr(1),
                                  "xmrig"};  // kubernetes issue 109105's name
  for (const std::string& c : bad_cids) {
    SCOPED_TRACE(c);
    EXPECT_EQ(ParseProcCgroup("0::/kubepods/pod" + uid + "/" + c + "\n").status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(ParseProcCgroup("0::/kubepods.slice/kubepods-pod" + uid + ".slice/cri-containerd-" +
                              c + ".scope\n")
                  .status()
                  .code(),
              absl::StatusCode::kNotFound);
  }
  // A slice with a Pod-like name outside any kubepods slice is not the kubelet's.
  std::string underscored = uid;
  for (char& ch : underscored) {
    if (ch == '-') ch = '_';
  }
  EXPECT_EQ(ParseProcCgroup("0::/user.slice/user-pod" + underscored + ".slice/cri-containerd-" +
                            cid + ".scope\n")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  // An unknown systemd unit under the Pod.
  EXPECT_EQ(ParseProcCgroup("0::/kubepods.slice/kubepods-pod" + underscored + ".slice/runc-" + cid +
                            ".scope\n")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(ParseProcCgroup, HostileTextIsInvalid) {
  const std::string good = FakeProcTree::CgroupText(
      {FakeProcTree::PodUid(4), FakeProcTree::ContainerId(4)}, CgroupStyle::kSystemdV2);
  ASSERT_TRUE(ParseProcCgroup(good).ok());
  const std::string hostile[] = {
      "",
      "\n",
      std::string(kMaxCgroupFileBytes + 1, 'a'),
      "0::/" + std::string(kMaxCgroupFileBytes, 'a') + "\n",
      good.substr(0, 20) + std::string(1, '\0') + good.substr(20),
      good.substr(0, 20) + "\xff\xfe" + good.substr(20),
      good.substr(0, 30) + "\xc0\xaf" + good.substr(30),  // overlong '/'
      "garbage\n",
      "0:/kubepods\n",
      "x::/\n",
      "0::relative/path\n",
      "0::\n",
      ":memory:/\n",
      "12345678901::/\n",
      "0:mem ory:/\n",
      good + "\n" + good,  // an empty line inside
  };
  for (const std::string& text : hostile) {
    SCOPED_TRACE(text.substr(0, 80));
    EXPECT_EQ(ParseProcCgroup(text).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // Many lines under the cap are fine.
  std::string many;
  while (many.size() + good.size() < kMaxCgroupFileBytes) many += "5:devices:/\n";
  EXPECT_EQ(ParseProcCgroup(many).status().code(), absl::StatusCode::kNotFound);
}

TEST(IsPodUid, Forms) {
  EXPECT_TRUE(IsPodUid("55c6c714-b240-4dec-9a45-57b61696ab6e"));
  EXPECT_TRUE(IsPodUid("8daa50c3a64c9ff60bb9eab7b44b56fd"));
  EXPECT_FALSE(IsPodUid("8daa50c3a64c9ff60bb9eab7b44b56f"));
  EXPECT_FALSE(IsPodUid("55c6c714_b240_4dec_9a45_57b61696ab6e"));
  EXPECT_TRUE(IsContainerId(FakeProcTree::ContainerId(9)));
  EXPECT_FALSE(IsContainerId(FakeProcTree::PodUid(9)));
}

}  // namespace
}  // namespace fabric::podprocs
