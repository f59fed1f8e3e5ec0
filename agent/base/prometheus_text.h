// Prometheus text-format label values: the ONE escaper every exposition
// writer (agent/metrics, the doctor's metrics) uses, so that no label value,
// whatever bytes it holds (a renamed netdev, a peer's provider string),
// can make the scrape unparsable.
#ifndef FABRIC_AGENT_BASE_PROMETHEUS_TEXT_H_
#define FABRIC_AGENT_BASE_PROMETHEUS_TEXT_H_

#include <string>
#include <string_view>

namespace fabric {

// Appends `v` as the inside of a quoted label value (text format 0.0.4):
// ill-formed UTF-8 becomes U+FFFD, `\`, `"` and newline are escaped (`\\`,
// `\"`, `\n`, the format's only escapes), and every other control character
// (C0, DEL, C1) becomes U+FFFD. Valid plain text is appended unchanged.
void AppendPrometheusLabelValue(std::string* out, std::string_view v);

// The same, returned.
std::string PrometheusLabelValue(std::string_view v);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_PROMETHEUS_TEXT_H_
