// Small, pure re-implementations of kubelet (Go) rules the simulator must
// match byte for byte: extended-resource-name validation, Go's %q / %v
// formatting used in kubelet error strings, filepath.Join, and grpc-go's
// error text. Each function names the Go code it mirrors.
#ifndef FABRIC_TOOLS_KUBELET_SIM_KUBELET_RULES_H_
#define FABRIC_TOOLS_KUBELET_SIM_KUBELET_RULES_H_

#include <grpcpp/support/status.h>

#include <string>
#include <vector>

namespace fabric::sim {

// k8s.io/apimachinery validation.IsDNS1123Subdomain: <= 253 chars of
// [a-z0-9]([-a-z0-9]*[a-z0-9])? labels joined by '.'.
bool IsDns1123Subdomain(const std::string& value);

// validation.IsQualifiedName: optional "<dns-subdomain>/" prefix, then a name
// of <= 63 chars matching ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
bool IsQualifiedName(const std::string& value);

// pkg/apis/core/v1/helper.IsExtendedResourceName: contains '/', does not
// contain "kubernetes.io/", does not start with "requests.", and
// "requests." + name is a qualified name.
bool IsExtendedResourceName(const std::string& name);

// Go fmt "%q" of a string (strconv.Quote).
std::string GoQuote(const std::string& s);
// Go fmt "%q" of a []string: ["a" "b"].
std::string GoQuoteList(const std::vector<std::string>& items);
// Go fmt "%v" of a []string: [a b].
std::string GoList(const std::vector<std::string>& items);

// path/filepath.Join(dir, elem): joins and lexically cleans, so an absolute
// `elem` ends up *under* dir and ".." components are resolved.
std::string GoJoinPath(const std::string& dir, const std::string& elem);
// path/filepath.Clean.
std::string GoCleanPath(const std::string& path);

// err.Error() of a grpc-go status error: "rpc error: code = <Name> desc = <msg>".
std::string GoGrpcError(const grpc::Status& status);
// grpc-go codes.Code.String() ("Unavailable", "DeadlineExceeded", ...).
std::string GoGrpcCodeName(grpc::StatusCode code);

}  // namespace fabric::sim

#endif  // FABRIC_TOOLS_KUBELET_SIM_KUBELET_RULES_H_
