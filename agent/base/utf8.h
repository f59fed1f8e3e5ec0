// Text that enters from outside (a doctor peer, sysfs names, the kubelet) is
// checked here, where it enters, and every writer that must not fail on
// content (JSON dumps, Prometheus labels, logs) can make any bytes safe.
#ifndef FABRIC_AGENT_BASE_UTF8_H_
#define FABRIC_AGENT_BASE_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fabric {

// True for well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
bool IsValidUtf8(absl::string_view s);

// `s` with every ill-formed sequence replaced by U+FFFD; valid text is
// returned unchanged.
std::string SanitizeUtf8(absl::string_view s);

// A name from outside (node, device, provider, netdev): at most `max_len`
// bytes of valid UTF-8 with no control characters (C0, DEL, C1).
// kInvalidArgument naming `what` and the problem otherwise; the message
// quotes the value escaped, so it is itself safe to log and to render.
absl::Status CheckExternalName(absl::string_view what, absl::string_view s, size_t max_len);

// `s` as printable ASCII, other bytes as \xNN: for error messages that quote
// untrusted bytes.
std::string EscapeBytes(absl::string_view s, size_t max_len = 64);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_UTF8_H_
