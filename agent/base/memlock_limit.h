// The RLIMIT_MEMLOCK value grammar shared by fabric-agent's --memlock-limit
// (validated at start, written into the CDI hook's arguments) and the
// fabric-memlock-hook that applies it. C++ standard library only: the hook is
// linked fully static and runs on the host, outside our image.
#ifndef FABRIC_AGENT_BASE_MEMLOCK_LIMIT_H_
#define FABRIC_AGENT_BASE_MEMLOCK_LIMIT_H_

#include <sys/resource.h>

#include <string>

namespace fabric {

// "unlimited" | "infinity" | "-1" (RLIM_INFINITY) | <bytes> | <n>Ki | <n>Mi |
// <n>Gi | <n>Ti. On failure returns false with a one-line reason in *error.
bool ParseMemlockLimit(const std::string& text, rlim_t* out, std::string* error);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_MEMLOCK_LIMIT_H_
