// JSON text for documents that may carry bytes from outside (sysfs names, a
// doctor peer, the kubelet): one dump that cannot throw on content.
//
// nlohmann::json::dump() throws type_error.316 on a string that is not valid
// UTF-8; in a handler thread with no catch that ends the process. Every
// serialization in agent/, plugin/ and tools/ goes through DumpJson instead,
// which writes each ill-formed byte as U+FFFD (error_handler_t::replace).
#ifndef FABRIC_AGENT_BASE_JSON_TEXT_H_
#define FABRIC_AGENT_BASE_JSON_TEXT_H_

#include <string>

#include "nlohmann/json.hpp"

namespace fabric {

// `j` as JSON text: compact when `indent` < 0, else pretty-printed with
// `indent` spaces. Never throws on content: invalid UTF-8 in a key or a value
// is replaced by U+FFFD; the output is always valid UTF-8 JSON.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

// The same for the ordered_json flavour.
std::string DumpJson(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_JSON_TEXT_H_
