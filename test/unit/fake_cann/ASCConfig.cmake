# Fake CANN: the ASC package.  Like CANN's, it needs ASCEND_HOME_PATH in the environment and
# puts the ASC language's modules on CMAKE_MODULE_PATH, so that project(... LANGUAGES ASC)
# finds them.
if(NOT DEFINED ENV{ASCEND_HOME_PATH} OR NOT IS_DIRECTORY "$ENV{ASCEND_HOME_PATH}")
  message(FATAL_ERROR "fake CANN: ASCEND_HOME_PATH is not set in the environment or names no "
                      "directory: source set_env.sh first")
endif()
list(APPEND CMAKE_MODULE_PATH
     "$ENV{ASCEND_HOME_PATH}/compiler/tikcpp/ascendc_kernel_cmake/asc_modules")
set(ASC_FOUND TRUE)
