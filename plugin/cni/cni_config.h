// Parsing of one CNI invocation (environment + stdin), CNI spec 1.1.0.
// Pure std + nlohmann::json so it can also be built as a libFuzzer target.
#ifndef FABRIC_PLUGIN_CNI_CNI_CONFIG_H_
#define FABRIC_PLUGIN_CNI_CNI_CONFIG_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace fabric::cni {

// CNI error codes (SPEC.md "Error" + libcni constants) and ours (100+).
enum CniErrorCode : int {
  kErrIncompatibleVersion = 1,
  kErrUnsupportedField = 2,
  kErrUnknownContainer = 3,
  kErrInvalidEnvironment = 4,
  kErrIoFailure = 5,
  kErrDecodingFailure = 6,
  kErrInvalidNetworkConfig = 7,
  kErrTryAgainLater = 11,
  kErrPluginNotAvailable = 50,
  kErrPluginNotAvailableLimitedConnectivity = 51,
  kErrDeviceNetns = 100,  // a fabric device could not be moved / is not where it should be
  kErrInternal = 999,
};

struct CniError {
  int code = kErrInternal;
  std::string msg;
  std::string details;
};

enum class Command { kAdd, kDel, kCheck, kStatus, kGc, kVersion };
const char* CommandName(Command c);

// Versions we speak, oldest first; the chain decides which one is used.
const std::vector<std::string>& SupportedVersions();
inline constexpr char kLatestVersion[] = "1.1.0";

// Keys in our plugin object of the network configuration.
inline constexpr char kAgentSocketKey[] = "agentSocket";
inline constexpr char kTimeoutKey[] = "timeoutSeconds";
inline constexpr char kLogFileKey[] = "logFile";
inline constexpr char kLogLevelKey[] = "logLevel";
// The agent's --agent-socket default.
inline constexpr char kDefaultAgentSocket[] = "/var/run/fabric-agent/agent.sock";

struct Attachment {
  std::string container_id;
  std::string ifname;
};

struct Invocation {
  Command command = Command::kVersion;
  std::string container_id;                 // CNI_CONTAINERID
  std::string netns;                        // CNI_NETNS
  std::string ifname;                       // CNI_IFNAME
  std::map<std::string, std::string> args;  // CNI_ARGS
  std::string cni_version;                  // from stdin
  std::string network_name;                 // "name"
  nlohmann::ordered_json config;            // the whole stdin object
  // prevResult exactly as received (key order kept); absent for the first
  // plugin of a chain.
  std::optional<nlohmann::ordered_json> prev_result;
  std::string agent_socket = kDefaultAgentSocket;
  double timeout_seconds = 30;
  std::string log_file;
  std::string log_level;
  std::vector<Attachment> valid_attachments;  // GC: cni.dev/valid-attachments

  std::string Arg(const std::string& key) const {
    auto it = args.find(key);
    return it == args.end() ? "" : it->second;
  }
};

using EnvLookup = std::map<std::string, std::string>;

// Parses the invocation; on failure returns the CNI error to print.
std::variant<Invocation, CniError> ParseInvocation(const EnvLookup& env,
                                                   const std::string& stdin_data);

// Compares "a.b.c" versions; nullopt if either is malformed.
std::optional<int> CompareVersions(const std::string& a, const std::string& b);

// The error object as printed on stdout.
std::string ErrorJson(const CniError& e, const std::string& cni_version);
// VERSION's reply.
std::string VersionJson();
// What ADD prints: prevResult unchanged, or a minimal result if we are first.
std::string AddResultJson(const Invocation& inv);

}  // namespace fabric::cni

#endif  // FABRIC_PLUGIN_CNI_CNI_CONFIG_H_
