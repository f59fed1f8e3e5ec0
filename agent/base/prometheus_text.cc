#include "agent/base/prometheus_text.h"

#include "agent/base/utf8.h"

namespace fabric {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// True when `v` needs no work: printable ASCII other than `\` and `"`.
// Label values are almost always this (device, port, counter names).
bool IsPlain(std::string_view v) {
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '\\' || c == '"') return false;
  }
  return true;
}

}  // namespace

void AppendPrometheusLabelValue(std::string* out, std::string_view v) {
  if (IsPlain(v)) {
    out->append(v.data(), v.size());
    return;
  }
  std::string sanitized;
  if (!IsValidUtf8(absl::string_view(v.data(), v.size()))) {
    sanitized = SanitizeUtf8(absl::string_view(v.data(), v.size()));
    v = sanitized;
  }
  out->reserve(out->size() + v.size() + 8);
  for (size_t i = 0; i < v.size(); ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == '\\' || c == '"') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c < 0x20 || c == 0x7f) {
      out->append(kReplacement);
    } else if (c == 0xc2 && i + 1 < v.size() && static_cast<unsigned char>(v[i + 1]) <= 0x9f) {
      out->append(kReplacement);  // a C1 control, U+0080..U+009F (valid UTF-8 here)
      ++i;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

std::string PrometheusLabelValue(std::string_view v) {
  std::string out;
  AppendPrometheusLabelValue(&out, v);
  return out;
}

}  // namespace fabric
