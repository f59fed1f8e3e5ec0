# Static linking of shipped binaries against Debian's own .a archives.
#
# FABRIC_STATIC (default ON for Release/MinSizeRel, OFF otherwise, always OFF under
# FABRIC_SANITIZE) turns on -ffunction-sections -fdata-sections for every object, and lets
# fabric_static_binary() link a target statically. Nothing else changes: tests and tools
# that do not call fabric_static_binary() stay dynamic, so the dev and sanitizer builds are
# untouched.
#
# fabric_static_binary(<target> [FULL])
#   Links <target> against the static archive of every third-party library on its link line
#   (gRPC, protobuf, abseil, c-ares, re2, upb, zlib, yaml-cpp, ...), found beside the shared
#   object the imported target names, with -static-libstdc++ -static-libgcc, --gc-sections
#   and --as-needed. gRPC is swapped for grpc_unsecure/grpc++_unsecure and OpenSSL is dropped:
#   every gRPC channel and server we have is plaintext on a unix socket.
#   Libraries Debian ships without an archive (libmnl, cpp-httplib, spdlog, fmt) stay shared,
#   as do glibc's own, unless FULL is given: FULL adds -static (glibc too), for binaries run
#   by the host outside our image (fabric-cni, fabric-memlock-hook); a FULL link fails loudly
#   if a library has no archive.
#   The rewrite is done by cmake/fabric-static-link.sh, set as the target's
#   CXX_LINKER_LAUNCHER, because CMake's imported targets name the shared objects by full
#   path and cannot be re-pointed for one consumer only.
set(_fabric_static_default OFF)
if(CMAKE_BUILD_TYPE MATCHES "^(Release|MinSizeRel)$")
  set(_fabric_static_default ON)
endif()
option(FABRIC_STATIC "Link shipped binaries statically (Debian .a archives)" ${_fabric_static_default})
if(FABRIC_STATIC AND FABRIC_SANITIZE)
  message(STATUS "FABRIC_SANITIZE=${FABRIC_SANITIZE}: FABRIC_STATIC ignored (sanitizers link dynamically)")
  set(FABRIC_STATIC OFF)  # shadows the cache entry for this configure only
endif()
if(FABRIC_STATIC)
  add_compile_options(-ffunction-sections -fdata-sections)
  # Debian ships fmt and spdlog as shared objects only: compile both header-only in this
  # build (every target, so no object expects the compiled library). The .so files stay
  # on dynamic links but --as-needed drops them from fabric_static_binary() targets.
  if(TARGET fmt::fmt)
    set_target_properties(fmt::fmt PROPERTIES INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
  endif()
  if(TARGET spdlog::spdlog)
    set_target_properties(spdlog::spdlog PROPERTIES INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL")
  endif()
endif()

set(FABRIC_STATIC_LINK_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/fabric-static-link.sh)

function(fabric_static_binary target)
  cmake_parse_arguments(A "FULL" "" "" ${ARGN})
  if(NOT FABRIC_STATIC)
    return()
  endif()
  set(mode deps)
  if(A_FULL)
    set(mode full)
  endif()
  set_target_properties(${target} PROPERTIES
    CXX_LINKER_LAUNCHER "${FABRIC_STATIC_LINK_SCRIPT};${mode}"
    C_LINKER_LAUNCHER "${FABRIC_STATIC_LINK_SCRIPT};${mode}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${FABRIC_STATIC_LINK_SCRIPT})
endfunction()
