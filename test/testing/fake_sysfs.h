// FakeSysfs: writes a sysfs + /dev tree that matches what the Linux kernel
// exposes for EFA, mlx5 (IB, RoCE, SR-IOV) and rxe RDMA devices, so discovery,
// health and metrics code can be tested without hardware and as non-root.
//
// Layout under root R:
//   R/sys/...   the sysfs root (HostPaths::sysfs_root)
//   R/dev/...   the dev root; device nodes are empty regular files.
// Every symlink is relative, so a tree copied or checked in elsewhere keeps
// working. Formats follow the kernel's show() functions byte for byte (see
// test/testdata/nodes/README.md for the sources of each value).
//
// Test-only code: an I/O failure aborts the process with a message instead of
// returning a status, so that tests can build trees without boilerplate.
#ifndef FABRIC_TEST_TESTING_FAKE_SYSFS_H_
#define FABRIC_TEST_TESTING_FAKE_SYSFS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/base/host_paths.h"

namespace fabric::testing {

// uverbsN with N >= 32 get a dynamically allocated char major from the kernel
// (minor N - 32). Consumers must read `dev`; this value is only what the fake
// happens to use.
inline constexpr uint32_t kFakeDynamicUverbsMajor = 240;

struct EfaOptions {
  int numa_node = -1;
  uint32_t device_id = 0xefa1;  // Debian 12 libibverbs knows 0xefa0..0xefa2.
  std::string rate = "100 Gb/sec (4X EDR)";
  std::string local_cpulist;  // "" -> "0-47"
};

struct Mlx5Options {
  int numa_node = -1;
  uint32_t device_id = 0x101b;            // ConnectX-6.
  std::string link_layer = "InfiniBand";  // or "Ethernet" (RoCE)
  std::string netdev;                     // RoCE netdev name; "" for IB.
  int num_ports = 1;
  std::string physfn;      // PF BDF if this function is an SR-IOV VF.
  int sriov_numvfs = 0;    // PF only: enabled VFs (sriov_numvfs file).
  int sriov_totalvfs = 0;  // PF only: 0 -> no SR-IOV files unless numvfs > 0.
  std::string rate = "200 Gb/sec (4X HDR)";
  std::string local_cpulist;  // "" -> "0-47"
  std::string fw_ver = "20.39.1002";
  std::string board_id = "MT_0000000223";
};

class FakeSysfs {
 public:
  // A fresh root (mkdtemp under /tmp), removed recursively by the destructor.
  FakeSysfs();
  // Writes into `root` (created if missing); removed on destruction only if
  // `owned`.
  explicit FakeSysfs(std::string root, bool owned = false);
  ~FakeSysfs();
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  std::string root() const { return root_; }
  std::string sys_root() const { return root_ + "/sys"; }
  std::string dev_root() const { return root_ + "/dev"; }
  // sysfs_root/dev_root as above; kubelet_root, cdi_dir and state_dir under
  // root (not created: the code under test creates what it needs).
  HostPaths paths() const;

  // Each Add* registers one RDMA device and returns its uverbs index N (the
  // first free one, as the kernel does).
  int AddEfa(const std::string& ibdev, const std::string& bdf, const EfaOptions& opts = {});
  // One mlx5 PCI function. A VF (opts.physfn set) also gets a virtfnK link on
  // its PF, whose PCI dir must already exist.
  int AddMlx5(const std::string& ibdev, const std::string& bdf, const Mlx5Options& opts = {});
  // Soft-RoCE on `netdev`: no PCI parent, a `parent` attribute instead.
  int AddRxe(const std::string& ibdev, const std::string& netdev);
  // The misc rdma_cm node: sys/class/misc/rdma_cm/{dev,abi_version} and
  // dev/infiniband/rdma_cm. Its minor is dynamic on real hosts.
  void AddRdmaCm(uint32_t minor);

  // state/phys_state as the kernel prints them ("1: DOWN", "3: Disabled"); a
  // bare name ("DOWN", "LinkUp") gets its numeric code prepended.
  void SetPortState(const std::string& ibdev, int port, const std::string& state,
                    const std::string& phys_state);
  // The GID table as the kernel shows it (fabric-facts §1.1, agent/sysfs/gid_table): every
  // slot has a gids/<i> file, an empty one reading as the all-zero GID, and
  // its gid_attrs/{types,ndevs}/<i> reads fail (EINVAL on Linux 6.1), which a
  // file tree models as absent. The builders write only the populated slots;
  // SetGidTableLength pads the table to the driver's length (rxe 1024,
  // mlx5 RoCE 256) with empty slots.
  void SetGidTableLength(const std::string& ibdev, int port, int length);
  // Populates slot `index` (`gid` in the kernel's 8-group text, `type`
  // "IB/RoCE v1" | "RoCE v2"; `netdev` "" for none: no ndevs file).
  void SetGid(const std::string& ibdev, int port, int index, const std::string& gid,
              const std::string& type, const std::string& netdev);
  // Empties slot `index`, as the kernel does when an address is removed.
  void ClearGid(const std::string& ibdev, int port, int index);
  // "0000:0000:0000:0000:0000:ffff:0a00:020f" for "10.0.2.15".
  static std::string Ipv4Gid(const std::string& ipv4);

  // A hw_counters file: port 0 = device-level <ibdev>/hw_counters (EFA), else
  // ports/<port>/hw_counters.
  void SetCounter(const std::string& ibdev, int port, const std::string& name, uint64_t value);
  // An IB PMA counter under ports/<port>/counters (mlx5 only).
  void SetPmaCounter(const std::string& ibdev, int port, const std::string& name, uint64_t value);
  // Like a hot-unplug or `rdma link delete`: the class entries, the IB device
  // dir, its uverbs/umad entries and their device nodes disappear; the PCI
  // function dir itself stays.
  void RemoveDevice(const std::string& ibdev);
  // What the host sees when an exclusive-mode RDMA netns move takes `ibdev`
  // into another network namespace: class/infiniband is netns-tagged, so the
  // class entry and the IB device dir vanish from this (host) view, while
  // class/infiniband_verbs (not tagged), the PCI function and the /dev nodes
  // stay. ReturnToHostNetns undoes it (DEL, or the Pod netns being destroyed).
  void MoveOutOfHostNetns(const std::string& ibdev);
  void ReturnToHostNetns(const std::string& ibdev);

  // Raw escape hatches, paths relative to root (e.g. "sys/class/...").
  void WriteFile(const std::string& rel_to_root, const std::string& content);
  void Symlink(const std::string& link_rel_to_root, const std::string& target_rel_to_root);
  void Remove(const std::string& rel_to_root);

  // Absolute path of the device dir as a consumer would open it
  // (sys/class/infiniband/<ibdev>, through the symlink).
  std::string IbDevicePath(const std::string& ibdev) const;

  // Exact counter names the kernel exposes (without `lifespan`).
  static const std::vector<std::string>& EfaDeviceCounterNames();  // 12
  static const std::vector<std::string>& EfaPortCounterNames();    // 22
  static const std::vector<std::string>& Mlx5PortCounterNames();
  static const std::vector<std::string>& Mlx5PmaCounterNames();
  static const std::vector<std::string>& RxePortCounterNames();  // 15

 private:
  struct Device {
    std::string ib_dir;   // rel to root: sys/devices/.../infiniband/<ibdev>
    std::string pci_dir;  // rel to root; "" for soft devices
    int uverbs = -1;
    std::vector<int> umads;  // one per port (mlx5)
  };

  int AllocUverbs();
  int AllocUmad();
  std::string EnsurePciFunction(const std::string& bdf, uint32_t vendor, uint32_t device,
                                uint32_t subsys_vendor, uint32_t subsys_device, uint32_t pci_class,
                                int numa_node, const std::string& cpulist,
                                const std::string& driver);
  void AddUverbs(const std::string& ibdev, const std::string& parent_dir, int n, int abi);
  void AddUmad(const std::string& ibdev, const std::string& parent_dir, int port, int n);
  void WriteCommonIbFiles(const std::string& ib_dir, const std::string& node_type,
                          const std::string& node_guid, const std::string& sys_image_guid,
                          const std::string& fw_ver, const std::string& node_desc);
  void RegisterClassLink(const std::string& ibdev, const std::string& ib_dir);
  void WriteCounters(const std::string& dir, const std::vector<std::string>& names);
  const Device& Find(const std::string& ibdev) const;

  std::string root_;
  bool owned_ = false;
  std::map<int, std::string> uverbs_;  // index -> ibdev
  std::map<int, std::string> umads_;   // index -> ibdev
  std::map<std::string, Device> devices_;
  int rxe_count_ = 0;
};

// "0000:4f:00.0" -> "rdmap79s0"; "0000:73:00.0" (multi-function) with prefix
// "ib" -> "ibp115s0f0". The PCI-location name rdma-core's rdma_rename gives.
std::string PciLocationName(const std::string& prefix, const std::string& bdf,
                            bool multi_function = false);

}  // namespace fabric::testing

#endif  // FABRIC_TEST_TESTING_FAKE_SYSFS_H_
