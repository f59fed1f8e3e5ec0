// JSON text for documents that may carry bytes from outside (sysfs names, a
// doctor peer, the kubelet): one dump that cannot throw on content.
//
// nlohmann::json::dump() throws type_error.316 on a string that is not valid
// UTF-8; in a handler thread with no catch that ends the process. Every
// serialization in agent/, plugin/ and tools/ goes through DumpJson instead,
// which writes each ill-formed byte as U+FFFD (error_handler_t::replace).
#ifndef FABRIC_AGENT_BASE_JSON_TEXT_H_
#define FABRIC_AGENT_BASE_JSON_TEXT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace fabric {

// `j` as JSON text: compact when `indent` < 0, else pretty-printed with
// `indent` spaces. Never throws on content: invalid UTF-8 in a key or a value
// is replaced by U+FFFD; the output is always valid UTF-8 JSON.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

// The same for the ordered_json flavour.
std::string DumpJson(const nlohmann::ordered_json& j, int indent = -1);

// Compact JSON text written as it goes, for large documents built on a hot
// path (/v1/pods at hundreds of Pods): no tree of values, one buffer. For
// well-formed strings the same text DumpJson writes (escapes as nlohmann's,
// an integral double keeps ".0"); each byte of an ill-formed UTF-8 sequence
// becomes U+FFFD, so the text is always valid UTF-8 JSON.
// The caller nests the calls correctly (Key only inside an object).
class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(out) {}
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // A string value, or null when `value` is empty.
  JsonWriter& StringOrNull(std::string_view value);

 private:
  void Separate();  // a comma before every value but a container's first
  std::string* out_;
  bool first_ = true;       // no value yet in the current container
  bool after_key_ = false;  // the next value follows a key
};

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
