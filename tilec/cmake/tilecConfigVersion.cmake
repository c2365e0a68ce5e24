# The version of tilec's CMake package (tilec's own, checked against tilec.__version__ by the
# tests).  It satisfies a request for no version, or for this version or an older one with the
# same major version.
set(PACKAGE_VERSION "0.1.0")

string(REGEX MATCH "^[0-9]+" _tilec_major "${PACKAGE_VERSION}")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION
       OR NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL _tilec_major)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
