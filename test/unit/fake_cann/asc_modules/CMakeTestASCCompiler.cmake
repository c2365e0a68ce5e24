# Fake CANN: the compiler is taken as working; the build itself tests it.
set(CMAKE_ASC_COMPILER_WORKS TRUE CACHE INTERNAL "")
