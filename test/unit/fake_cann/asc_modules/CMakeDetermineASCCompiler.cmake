# Fake CANN: the ASC compiler is the toolkit's bisheng unless CMAKE_ASC_COMPILER names one.
if(NOT CMAKE_ASC_COMPILER)
  cmake_host_system_information(RESULT _fake_cann_arch QUERY OS_PLATFORM)
  find_program(CMAKE_ASC_COMPILER bisheng NO_DEFAULT_PATH PATHS
               "$ENV{ASCEND_HOME_PATH}/${_fake_cann_arch}-linux/ccec_compiler/bin"
               "$ENV{ASCEND_HOME_PATH}/compiler/ccec_compiler/bin")
endif()
if(NOT CMAKE_ASC_COMPILER)
  message(FATAL_ERROR "fake CANN: no bisheng in $ENV{ASCEND_HOME_PATH}")
endif()
set(CMAKE_ASC_COMPILER_ENV_VAR "ASC")
file(WRITE "${CMAKE_PLATFORM_INFO_DIR}/CMakeASCCompiler.cmake"
     "set(CMAKE_ASC_COMPILER \"${CMAKE_ASC_COMPILER}\")\n"
     "set(CMAKE_ASC_COMPILER_LOADED 1)\n"
     "set(CMAKE_ASC_COMPILER_ENV_VAR \"ASC\")\n"
     "set(CMAKE_ASC_SOURCE_FILE_EXTENSIONS asc)\n"
     "set(CMAKE_ASC_LINKER_PREFERENCE 40)\n")
