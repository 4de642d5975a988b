# `cmake --install`: the shared and static libraries, the public headers (neargnn.h, neargnn_serve.h), the `neargnn` command,
# pkg-config's neargnn.pc, the CMake package (find_package(neargnn) -> neargnn::neargnn) and the
# Python package (docs/api.md, docs/python.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS neargnn_shared neargnn_lib neargnn
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/neargnn.h include/neargnn_serve.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# What a static link needs besides libneargnn.a. pkg-config knows hwloc, zlib and cJSON by their
# own .pc files (Requires.private; libmicrohttpd for the serving layer, neargnn_serve.h);
# oneDNN, OpenMP and CUDA have none on Debian.
set(NG_PC_REQUIRES_PRIVATE "hwloc zlib libcjson libmicrohttpd")
get_filename_component(NG_DNNL_LIBDIR "${DNNL_LIBRARY}" DIRECTORY)
set(NG_PC_LIBS_PRIVATE "-L${NG_DNNL_LIBDIR} -ldnnl ${OpenMP_C_FLAGS} -lpthread -lm")
if(NG_HAVE_MPI)
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND NG_PC_LIBS_PRIVATE " ${lib}")
  endforeach()
endif()
if(NG_HAVE_CUDA)
  string(APPEND NG_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -lcublasLt -lstdc++")
endif()
# The prefix relative to the .pc file's folder, so that the installed tree can move (and
# `cmake --install --prefix` works): pkg-config expands ${pcfiledir}.
file(RELATIVE_PATH NG_PC_TO_PREFIX "/r/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/r")
configure_file(cmake/neargnn.pc.in ${PROJECT_BINARY_DIR}/neargnn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/neargnn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(NG_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/neargnn)
configure_package_config_file(cmake/neargnn-config.cmake.in
                              ${PROJECT_BINARY_DIR}/neargnn-config.cmake
                              INSTALL_DESTINATION ${NG_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/neargnn-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/neargnn-config.cmake
              ${PROJECT_BINARY_DIR}/neargnn-config-version.cmake
        DESTINATION ${NG_CMAKE_DIR})

# The Python package, with the path of the installed library written into it.
set(NG_PYTHON_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/python3/dist-packages" CACHE STRING
    "Where `cmake --install` puts the Python package neargnn (relative to the prefix)")
file(GLOB NG_PYTHON_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/neargnn/*.py)
list(FILTER NG_PYTHON_FILES EXCLUDE REGEX "_installed\\.py$")
install(FILES ${NG_PYTHON_FILES} DESTINATION ${NG_PYTHON_INSTALL_DIR}/neargnn)
install(CODE "
  set(libdir \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_LIBDIR}\")
    set(libdir \"${CMAKE_INSTALL_LIBDIR}\")
  endif()
  file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${NG_PYTHON_INSTALL_DIR}/neargnn/_installed.py\"
       \"# Written by cmake --install: where the shared library was installed.\\nLIBDIR = \\\"\${libdir}\\\"\\n\")
")
