# Static linking against Debian's own .a archives: ONE function,
#
#   fabric_static_executable(<target> [PARTIAL])
#
# Default (host binaries: fabric-cni, fabric-memlock-hook, run by the container runtime on
# the host, outside our image): fully static, glibc included; the link fails loudly if a
# library has no archive. Done in every build but the sanitizer builds.
#
# PARTIAL (fabric-agent, in our image): every third-party library with an archive is linked
# statically (gRPC, protobuf, abseil, c-ares, re2, upb, zlib, yaml-cpp, ...), plus
# -static-libstdc++ -static-libgcc; glibc and the libraries Debian ships without an archive
# (libmnl) stay shared, and so does libfabric (its archive drags in every
# provider's libraries). Done when FABRIC_STATIC is ON: the default of Release/MinSizeRel
# (the image build), OFF otherwise and always OFF under FABRIC_SANITIZE, so dev and test
# builds keep the dynamic agent. FABRIC_STATIC also compiles every object with
# -ffunction-sections -fdata-sections so that --gc-sections can drop unreached code.
#
# Either way gRPC is swapped for grpc_unsecure/grpc++_unsecure (every gRPC channel and server we
# have is plaintext on a unix socket; OpenSSL comes from its archives for agent/http: the /v1/pods
# TLS listener and the Kubernetes API client), and fmt/spdlog, which Debian
# ships only as shared objects, come from cmake/static/fmt_spdlog.cc (their out-of-line parts
# compiled from their own headers). The link line is rewritten by cmake/fabric-static-link.sh,
# set as the target's linker launcher: CMake's imported targets name the shared objects by full
# path and cannot be re-pointed for one consumer only, so each .so becomes the .a beside it.
# Targets that do not call this function (tests, tools) are untouched.
include_guard(GLOBAL)

set(_fabric_static_default OFF)
if(CMAKE_BUILD_TYPE MATCHES "^(Release|MinSizeRel)$")
  set(_fabric_static_default ON)
endif()
option(FABRIC_STATIC "Link fabric-agent statically (Debian .a archives)" ${_fabric_static_default})
if(FABRIC_STATIC AND FABRIC_SANITIZE)
  message(STATUS "FABRIC_SANITIZE=${FABRIC_SANITIZE}: FABRIC_STATIC ignored (sanitizers link dynamically)")
  set(FABRIC_STATIC OFF)  # shadows the cache entry for this configure only
endif()
if(FABRIC_STATIC)
  add_compile_options(-ffunction-sections -fdata-sections)
endif()

set(FABRIC_STATIC_DIR ${CMAKE_CURRENT_LIST_DIR}/static)
set(FABRIC_STATIC_LINK_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/fabric-static-link.sh)

function(fabric_static_executable target)
  cmake_parse_arguments(A "PARTIAL" "" "" ${ARGN})
  if(FABRIC_SANITIZE)
    message(STATUS "${target}: sanitizer build, linked dynamically")
    return()
  endif()
  if(A_PARTIAL AND NOT FABRIC_STATIC)
    return()
  endif()
  set(mode full)
  if(A_PARTIAL)
    set(mode deps)
  endif()
  if(NOT TARGET fabric_static_fmt_spdlog)
    add_library(fabric_static_fmt_spdlog OBJECT ${FABRIC_STATIC_DIR}/fmt_spdlog.cc)
    target_link_libraries(fabric_static_fmt_spdlog PRIVATE spdlog::spdlog fmt::fmt)
    target_compile_options(fabric_static_fmt_spdlog PRIVATE -w -ffunction-sections -fdata-sections)
  endif()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:fabric_static_fmt_spdlog>)
  set_target_properties(${target} PROPERTIES
    CXX_LINKER_LAUNCHER "${FABRIC_STATIC_LINK_SCRIPT};${mode}"
    C_LINKER_LAUNCHER "${FABRIC_STATIC_LINK_SCRIPT};${mode}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${FABRIC_STATIC_LINK_SCRIPT})
endfunction()
