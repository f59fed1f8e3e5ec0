# fabric_static_executable(<target>)
#
# Links <target> fully static (glibc, libstdc++, gRPC, protobuf, abseil, fmt,
# spdlog): for binaries the container runtime runs ON THE HOST (fabric-cni,
# fabric-memlock-hook), where none of our image's libraries exist.
#
# Debian's CMake packages export only the shared libraries (gRPC::grpc++ is
# libgrpc++.so.1.51.1), and `-static` refuses a .so on the link line. So the
# target's link line is rebuilt when the top-level directory is done:
#   - our own fabric_* archives, walked from its LINK_LIBRARIES;
#   - for each imported dependency, the static archives `pkg-config --static`
#     names (gRPC as grpc++_unsecure: the host binaries speak over a unix
#     socket, no TLS, so no libssl/libcrypto);
#   - fmt and spdlog, which Debian ships without .a files, compiled from their
#     own headers (cmake/static/fmt_spdlog.cc).
# Compile usage requirements (include dirs, definitions) are kept as they were.
# Sections are garbage-collected. Sanitizer builds keep the dynamic link.
include_guard(GLOBAL)

set(FABRIC_STATIC_DIR ${CMAKE_CURRENT_LIST_DIR}/static)

# Imported target -> pkg-config modules whose --static libs replace it.
function(_fabric_static_pkg_modules item out)
  set(m "")
  if(item MATCHES "^gRPC::")
    set(m grpc++_unsecure)
  elseif(item STREQUAL "protobuf::libprotobuf")
    set(m protobuf)
  elseif(item STREQUAL "protobuf::libprotobuf-lite")
    set(m protobuf-lite)
  elseif(item MATCHES "^absl::(.+)$")
    set(m absl_${CMAKE_MATCH_1})
  endif()
  set(${out} "${m}" PARENT_SCOPE)
endfunction()

function(_fabric_static_link target)
  get_target_property(direct ${target} LINK_LIBRARIES)
  if(NOT direct)
    set(direct "")
  endif()
  set(queue ${direct})
  set(internal "")
  set(modules "")
  set(archives "")
  set(seen "")
  set(need_fmt_spdlog OFF)
  while(queue)
    list(POP_FRONT queue item)
    if(item MATCHES "^\\$<LINK_ONLY:(.+)>$")
      set(item "${CMAKE_MATCH_1}")
    endif()
    if(item IN_LIST seen OR item MATCHES "-NOTFOUND$" OR item STREQUAL "")
      continue()
    endif()
    list(APPEND seen "${item}")
    if(NOT TARGET "${item}")
      if(item MATCHES "^\\$<")
        message(FATAL_ERROR "fabric_static_executable(${target}): cannot map '${item}'")
      endif()
      list(APPEND archives "${item}")  # plain flags such as -lrt
      continue()
    endif()
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      list(APPEND queue ${aliased})
      continue()
    endif()
    get_target_property(imported ${item} IMPORTED)
    get_target_property(type ${item} TYPE)
    if(NOT imported)
      list(APPEND internal ${item})
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(l ${item} LINK_LIBRARIES)
        if(l)
          list(APPEND queue ${l})
        endif()
      endif()
      get_target_property(il ${item} INTERFACE_LINK_LIBRARIES)
      if(il)
        list(APPEND queue ${il})
      endif()
      continue()
    endif()
    # Imported (third-party) targets.
    _fabric_static_pkg_modules(${item} m)
    if(m)
      list(APPEND modules ${m})
    elseif(item MATCHES "^(fmt::fmt|spdlog::spdlog)$")
      set(need_fmt_spdlog ON)
    elseif(item STREQUAL "Threads::Threads" OR type STREQUAL "INTERFACE_LIBRARY")
      # Header-only or flags-only: usage requirements stay, nothing to link,
      # except what it links itself (PkgConfig:: targets list .so paths).
      get_target_property(il ${item} INTERFACE_LINK_LIBRARIES)
      foreach(lib IN LISTS il)
        if(lib MATCHES "^(.*/lib[^/]+)\\.so(\\.[0-9.]+)?$")
          if(NOT EXISTS "${CMAKE_MATCH_1}.a")
            message(FATAL_ERROR "fabric_static_executable(${target}): no ${CMAKE_MATCH_1}.a for ${item}")
          endif()
          list(APPEND archives "${CMAKE_MATCH_1}.a")
        elseif(lib)
          list(APPEND queue "${lib}")
        endif()
      endforeach()
    else()
      message(FATAL_ERROR "fabric_static_executable(${target}): no static mapping for ${item}")
    endif()
  endwhile()

  set(link "")
  if(internal)
    list(APPEND link "-Wl,--start-group")
    foreach(lib IN LISTS internal)
      get_target_property(type ${lib} TYPE)
      if(type STREQUAL "STATIC_LIBRARY")
        list(APPEND link "$<TARGET_FILE:${lib}>")
        add_dependencies(${target} ${lib})
      elseif(type STREQUAL "OBJECT_LIBRARY")
        target_sources(${target} PRIVATE $<TARGET_OBJECTS:${lib}>)
      endif()
    endforeach()
    list(APPEND link "-Wl,--end-group")
  endif()
  if(need_fmt_spdlog)
    if(NOT TARGET fabric_static_fmt_spdlog)
      add_library(fabric_static_fmt_spdlog OBJECT ${FABRIC_STATIC_DIR}/fmt_spdlog.cc)
      target_link_libraries(fabric_static_fmt_spdlog PRIVATE spdlog::spdlog fmt::fmt)
      target_compile_options(fabric_static_fmt_spdlog PRIVATE -w -ffunction-sections -fdata-sections)
    endif()
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:fabric_static_fmt_spdlog>)
  endif()
  if(modules)
    list(REMOVE_DUPLICATES modules)
    execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --static --libs ${modules}
      OUTPUT_VARIABLE pc RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "fabric_static_executable(${target}): pkg-config --static ${modules} failed")
    endif()
    separate_arguments(pc UNIX_COMMAND "${pc}")
    list(APPEND link ${pc})
    if("grpc++_unsecure" IN_LIST modules)
      # Debian's grpc_unsecure.pc leaves out what libgrpc_unsecure.a itself
      # needs (its Libs.private assume the shared library).
      list(APPEND link -lupb -lre2 -lcares -laddress_sorting -lgpr -lz)
    endif()
  endif()
  list(APPEND link ${archives})

  # Replace the link line; keep the compile-time usage requirements of what
  # the target linked (evaluated transitively by $<TARGET_PROPERTY>).
  set_property(TARGET ${target} PROPERTY LINK_LIBRARIES "")
  foreach(d IN LISTS direct)
    if(d MATCHES "^\\$<LINK_ONLY:" OR NOT TARGET "${d}")
      continue()
    endif()
    target_include_directories(${target} PRIVATE $<TARGET_PROPERTY:${d},INTERFACE_INCLUDE_DIRECTORIES>)
    target_compile_definitions(${target} PRIVATE $<TARGET_PROPERTY:${d},INTERFACE_COMPILE_DEFINITIONS>)
    target_compile_options(${target} PRIVATE $<TARGET_PROPERTY:${d},INTERFACE_COMPILE_OPTIONS>)
  endforeach()
  target_link_libraries(${target} PRIVATE ${link})
  target_compile_options(${target} PRIVATE -ffunction-sections -fdata-sections)
  target_link_options(${target} PRIVATE -static -pthread -Wl,--gc-sections)
endfunction()

function(fabric_static_executable target)
  if(FABRIC_SANITIZE)
    message(STATUS "${target}: sanitizer build, linked dynamically")
    return()
  endif()
  if(NOT PKG_CONFIG_EXECUTABLE)
    find_package(PkgConfig REQUIRED)
  endif()
  # Deferred to the end of the top-level directory so libraries defined later
  # (and links added after this call) are part of the walk.
  # (DEFER expands variables when the call runs, hence EVAL to bind ${target} now.)
  cmake_language(EVAL CODE
    "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]] CALL _fabric_static_link [[${target}]])")
endfunction()
