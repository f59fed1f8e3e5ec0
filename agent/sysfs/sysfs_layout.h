// SysfsLayout: the one place that knows where the kernel puts the RDMA
// subsystem in sysfs. Discovery, health, metrics and `fabricctl check` ask it
// for paths instead of spelling class/... themselves.
//
//   class/infiniband/<ibdev>/                    netns-tagged (exclusive mode: only the
//     node_type node_guid parent                 devices of the reader's netns)
//     device -> PCI function (vendor device numa_node driver physfn sriov_numvfs net/)
//     hw_counters/                               device-level driver counters (EFA, new kernels)
//     ports/<n>/{state,phys_state,link_layer,rate,gid_attrs/ndevs/0}
//     ports/<n>/gids/<i>, gid_attrs/{types,ndevs}/<i>   the GID table (agent/sysfs/gid_table)
//     ports/<n>/hw_counters/                     port-level driver counters
//     ports/<n>/counters/                        IB PMA counters
//   class/infiniband_verbs/uverbs<N>/{ibdev,dev,device}   not netns-tagged
//   class/infiniband_mad/{umad,issm}<N>/{ibdev,port,dev}  not netns-tagged
//   class/misc/rdma_cm/dev
#ifndef FABRIC_AGENT_SYSFS_SYSFS_LAYOUT_H_
#define FABRIC_AGENT_SYSFS_SYSFS_LAYOUT_H_

#include <string>

#include "agent/base/host_paths.h"

namespace fabric {

class SysfsLayout {
 public:
  explicit SysfsLayout(std::string sysfs_root) : root_(std::move(sysfs_root)) {}
  explicit SysfsLayout(const HostPaths& paths) : SysfsLayout(paths.sysfs_root) {}

  const std::string& root() const { return root_; }

  // Class directories.
  std::string InfinibandClassDir() const { return root_ + "/class/infiniband"; }
  std::string VerbsClassDir() const { return root_ + "/class/infiniband_verbs"; }
  std::string MadClassDir() const { return root_ + "/class/infiniband_mad"; }
  std::string RdmaCmDir() const { return root_ + "/class/misc/rdma_cm"; }

  // One IB device.
  std::string DeviceDir(const std::string& ibdev) const;
  // The `device` link to the PCI function (absent for soft devices).
  std::string PciFunctionLink(const std::string& ibdev) const;
  std::string DeviceHwCountersDir(const std::string& ibdev) const;
  std::string PortsDir(const std::string& ibdev) const;
  std::string PortDir(const std::string& ibdev, int port) const;
  std::string PortStateFile(const std::string& ibdev, int port) const;
  std::string PortPhysStateFile(const std::string& ibdev, int port) const;
  std::string PortHwCountersDir(const std::string& ibdev, int port) const;
  std::string PortPmaCountersDir(const std::string& ibdev, int port) const;
  // The GID table: one file per slot in each.
  std::string PortGidsDir(const std::string& ibdev, int port) const;
  std::string PortGidTypesDir(const std::string& ibdev, int port) const;
  std::string PortGidNdevsDir(const std::string& ibdev, int port) const;

  // A char-device class entry (uverbsN, umadN, issmN, rdma_cm) by the name
  // of its node under /dev/infiniband; "" for a name the kernel never uses.
  std::string ClassDirForDevNode(const std::string& node_name) const;
  std::string VerbsNodeDir(const std::string& uverbs_name) const {
    return VerbsClassDir() + "/" + uverbs_name;
  }

 private:
  std::string root_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_SYSFS_SYSFS_LAYOUT_H_
