#include "agent/base/json_text.h"

namespace fabric {

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string DumpJson(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false,
                nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace fabric
