// JSON text for documents that may carry bytes from outside (sysfs names, a
// doctor peer, the kubelet): one dump that cannot throw on content.
//
// nlohmann::json::dump() throws type_error.316 on a string that is not valid
// UTF-8; in a handler thread with no catch that ends the process. Every
// serialization in agent/, plugin/ and tools/ goes through DumpJson instead,
// which writes each ill-formed byte as U+FFFD (error_handler_t::replace).
#ifndef FABRIC_AGENT_BASE_JSON_TEXT_H_
#define FABRIC_AGENT_BASE_JSON_TEXT_H_

#include <initializer_list>
#include <string>

#include "nlohmann/json.hpp"

namespace fabric {

// `j` as JSON text: compact when `indent` < 0, else pretty-printed with
// `indent` spaces. Never throws on content: invalid UTF-8 in a key or a value
// is replaced by U+FFFD; the output is always valid UTF-8 JSON.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

// The same for the ordered_json flavour.
std::string DumpJson(const nlohmann::ordered_json& j, int indent = -1);

// Documents from outside (the API server, another agent) are read without
// trusting their types. The member at `path` through nested objects, or
// nullptr when a step is missing or not an object.
template <typename Json>
const Json* MemberAt(const Json& j, std::initializer_list<const char*> path) {
  const Json* at = &j;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

// The string at `path`, or "" when it is missing or not a string.
template <typename Json>
std::string StringAt(const Json& j, std::initializer_list<const char*> path) {
  const Json* at = MemberAt(j, path);
  return at && at->is_string() ? at->template get<std::string>() : "";
}

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_JSON_TEXT_H_
