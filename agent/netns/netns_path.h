// Opening a network namespace by path (CNI_NETNS, a record's netns) without
// trusting the path: the file must be an nsfs inode of a network namespace.
// A FIFO, a device node or a regular file at that path is refused without
// blocking, so a bad CNI_NETNS cannot wedge a caller that holds a lock.
#ifndef FABRIC_AGENT_NETNS_NETNS_PATH_H_
#define FABRIC_AGENT_NETNS_NETNS_PATH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabric::netns {

// An O_RDONLY fd on the network namespace at `path` (the caller closes it).
// kNotFound if the path is missing; kInvalidArgument if it is not a network
// namespace (not on nsfs, or a namespace of another type).
absl::StatusOr<int> OpenNetnsFd(const std::string& path);

// The same check, without keeping the fd.
absl::Status CheckNetnsPath(const std::string& path);

}  // namespace fabric::netns

#endif  // FABRIC_AGENT_NETNS_NETNS_PATH_H_
