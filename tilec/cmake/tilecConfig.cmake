# tilec's CMake package: find_package(tilec CONFIG) with tilec_DIR set to `tilec --cmake-dir`.
#
# Provides tilec_add_kernel() (see TilecAddKernel.cmake) and TILEC_EXECUTABLE, the tilec command
# that builds kernels: the one on PATH unless given, and it must be the tilec this package
# belongs to (so that a stray install never builds with another version).
include_guard(GLOBAL)

find_program(TILEC_EXECUTABLE tilec DOC "the tilec compiler command")
if(NOT TILEC_EXECUTABLE)
  set(tilec_FOUND FALSE)
  set(tilec_NOT_FOUND_MESSAGE
      "no 'tilec' command on PATH: activate the environment tilec is installed in, or set "
      "TILEC_EXECUTABLE to its path")
  return()
endif()

execute_process(COMMAND "${TILEC_EXECUTABLE}" --cmake-dir
                OUTPUT_VARIABLE _tilec_cmake_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _tilec_status)
file(REAL_PATH "${CMAKE_CURRENT_LIST_DIR}" _tilec_here)
if(NOT _tilec_status EQUAL 0 OR NOT EXISTS "${_tilec_cmake_dir}")
  set(tilec_FOUND FALSE)
  set(tilec_NOT_FOUND_MESSAGE "'${TILEC_EXECUTABLE} --cmake-dir' failed")
  return()
endif()
file(REAL_PATH "${_tilec_cmake_dir}" _tilec_cmake_dir)
if(NOT _tilec_cmake_dir STREQUAL _tilec_here)
  set(tilec_FOUND FALSE)
  set(tilec_NOT_FOUND_MESSAGE
      "TILEC_EXECUTABLE=${TILEC_EXECUTABLE} belongs to the package in ${_tilec_cmake_dir}, "
      "not to this one (${_tilec_here}): set TILEC_EXECUTABLE or tilec_DIR to match")
  return()
endif()

include("${CMAKE_CURRENT_LIST_DIR}/TilecAddKernel.cmake")
