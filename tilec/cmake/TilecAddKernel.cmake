# tilec_add_kernel(<name> SOURCES f.tile TARGET cpu|ptx|ascend|ascend-sim [ARCH a]
#                  [DEFINES sym=v ...] [OPTIONS opt ...])
#
# Compiles f.tile with tilec at build time into <name>.so and <name>.h in
# ${CMAKE_CURRENT_BINARY_DIR}/tilec/<name>/, and defines <name>: an IMPORTED shared library that
# consumers target_link_libraries() against, with that directory on their include path.
# The kernel is rebuilt when f.tile changes or when the command line does (TARGET, ARCH,
# DEFINES, OPTIONS or the tilec command: they are written to <name>.options, which is rewritten
# only when it changes), and not otherwise.  A build step that reruns tilec on an unchanged
# input is served by tilec's compile cache.
#
# TARGET ascend builds through CANN's own CMake support: ASCEND_HOME_PATH (a CMake variable or
# the environment) must name the toolkit at configure time.  At build time tilec writes the
# kernel's CMake project (tilec --emit=project: find_package(ASC), LANGUAGES ASC) to
# <name>.ascend/ in that directory, and an ExternalProject (<name>_cann) configures and builds
# it in build/ with ASCEND_HOME_PATH, and CMAKE_ASC_COMPILER, ASC_DIR, CMAKE_TOOLCHAIN_FILE,
# CMAKE_BUILD_TYPE and the C and C++ compilers where this project sets them.
include_guard(GLOBAL)
include(ExternalProject)

set(_TILEC_TARGETS cpu ptx ascend ascend-sim)
set(_TILEC_CANN_FORWARDED CMAKE_ASC_COMPILER ASC_DIR CMAKE_TOOLCHAIN_FILE CMAKE_BUILD_TYPE
    CMAKE_C_COMPILER CMAKE_CXX_COMPILER)

function(tilec_add_kernel name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "TARGET;ARCH" "SOURCES;DEFINES;OPTIONS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tilec_add_kernel(${name}): unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  list(LENGTH ARG_SOURCES _count)
  if(NOT _count EQUAL 1)
    message(FATAL_ERROR "tilec_add_kernel(${name}): SOURCES takes exactly one .tile file")
  endif()
  if(NOT ARG_TARGET IN_LIST _TILEC_TARGETS)
    message(FATAL_ERROR "tilec_add_kernel(${name}): TARGET must be one of "
                        "${_TILEC_TARGETS}, got '${ARG_TARGET}'")
  endif()
  if(ARG_TARGET STREQUAL "ascend")
    if(NOT ASCEND_HOME_PATH AND DEFINED ENV{ASCEND_HOME_PATH})
      set(ASCEND_HOME_PATH "$ENV{ASCEND_HOME_PATH}")
    endif()
    if(NOT ASCEND_HOME_PATH OR NOT IS_DIRECTORY "${ASCEND_HOME_PATH}")
      message(FATAL_ERROR
        "tilec_add_kernel(${name}): TARGET ascend builds with CANN, and ASCEND_HOME_PATH "
        "('${ASCEND_HOME_PATH}') names no CANN toolkit: source CANN's set_env.sh (or pass "
        "-DASCEND_HOME_PATH=...) before configuring, or use TARGET ascend-sim (the CPU twin)")
    endif()
  endif()

  get_filename_component(_source "${ARG_SOURCES}" ABSOLUTE)
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/tilec/${name}")
  set(_library "${_dir}/${name}.so")
  set(_header "${_dir}/${name}.h")
  set(_args --target "${ARG_TARGET}")
  if(ARG_ARCH)
    list(APPEND _args --arch "${ARG_ARCH}")
  endif()
  foreach(_define IN LISTS ARG_DEFINES)
    list(APPEND _args -D "${_define}")
  endforeach()
  list(APPEND _args ${ARG_OPTIONS})

  set(_stamp "${_dir}/${name}.options")
  file(CONFIGURE OUTPUT "${_stamp}" CONTENT "${TILEC_EXECUTABLE} ${_args}\n" @ONLY)
  set(_comment "tilec ${name}: ${ARG_SOURCES} --target ${ARG_TARGET}")
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES
    IMPORTED_LOCATION "${_library}"
    INTERFACE_INCLUDE_DIRECTORIES "${_dir}")
  if(ARG_TARGET STREQUAL "ascend")
    _tilec_add_cann_build(${name} "${_source}" "${_dir}" "${_stamp}" "${_comment}" ${_args})
    add_dependencies(${name} ${name}_cann)
  else()
    add_custom_command(
      OUTPUT "${_library}" "${_header}"
      COMMAND "${TILEC_EXECUTABLE}" "${_source}" ${_args} -o "${_library}"
      DEPENDS "${_source}" "${_stamp}"
      COMMENT "${_comment}"
      VERBATIM)
    add_custom_target(${name}_tilec ALL DEPENDS "${_library}" "${_header}")
    add_dependencies(${name} ${name}_tilec)
  endif()
endfunction()

# TARGET ascend: ${name}_tilec writes the project <dir>/<name>.ascend and copies its header to
# <dir>; ${name}_cann builds the project in <dir>/build and puts <name>.so in <dir>.  The build
# step reruns whenever tilec has rewritten the project (its CMakeLists.txt is newer).
function(_tilec_add_cann_build name source dir stamp comment)
  set(_project "${dir}/${name}.ascend")
  add_custom_command(
    OUTPUT "${_project}/CMakeLists.txt" "${dir}/${name}.h"
    COMMAND "${TILEC_EXECUTABLE}" "${source}" ${ARGN} --emit=project -o "${_project}"
    COMMAND "${CMAKE_COMMAND}" -E copy "${_project}/${name}.h" "${dir}/${name}.h"
    DEPENDS "${source}" "${stamp}"
    COMMENT "${comment}"
    VERBATIM)
  add_custom_target(${name}_tilec DEPENDS "${_project}/CMakeLists.txt" "${dir}/${name}.h")

  set(_cache_args
    "-DASCEND_HOME_PATH:PATH=${ASCEND_HOME_PATH}"
    "-DCMAKE_LIBRARY_OUTPUT_DIRECTORY:PATH=${dir}")
  foreach(_variable IN LISTS _TILEC_CANN_FORWARDED)
    if(${_variable})
      list(APPEND _cache_args "-D${_variable}:STRING=${${_variable}}")
    endif()
  endforeach()
  ExternalProject_Add(${name}_cann
    PREFIX "${dir}/cann"
    SOURCE_DIR "${_project}"
    BINARY_DIR "${dir}/build"
    DOWNLOAD_COMMAND ""
    INSTALL_COMMAND ""
    CMAKE_CACHE_ARGS ${_cache_args}
    BUILD_BYPRODUCTS "${dir}/${name}.so"
    DEPENDS ${name}_tilec)
  ExternalProject_Add_StepDependencies(${name}_cann build "${_project}/CMakeLists.txt")
endfunction()
