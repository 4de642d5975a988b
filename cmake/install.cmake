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

# What a static link needs besides libneargnn.a (Libs.private): each dependency as this build
# found and linked it. A shared library brings its own dependencies (libhwloc.so its libudev.so.1),
# so it needs only its -l; a static archive also needs the libraries its pkg-config file lists
# for a static link (libhwloc.a: -ludev). Not Requires.private: `pkg-config --static` would then
# add every dependency's static dependencies whatever kind of library was found, -ludev among
# them, and the link fails where only the shared libudev is installed (no libudev-dev).
# oneDNN, OpenMP and CUDA have no .pc file on Debian; CUDA's libraries are in the configured
# toolkit's folder.
find_package(PkgConfig QUIET)
function(ng_pc_lib path pc_name)
  get_filename_component(dir "${path}" DIRECTORY)
  get_filename_component(name "${path}" NAME_WE)
  string(REGEX REPLACE "^lib" "" name "${name}")
  set(flags " -l${name}")
  string(FIND " ${NG_PC_LIBS_PRIVATE} " " -L${dir} " known)
  if(known EQUAL -1)
    set(flags " -L${dir}${flags}")
  endif()
  if(path MATCHES "\\.a$" AND PKG_CONFIG_FOUND)
    pkg_check_modules(NG_PC_${name} QUIET ${pc_name})
    foreach(lib ${NG_PC_${name}_STATIC_LIBRARIES})
      if(NOT lib STREQUAL name)
        string(APPEND flags " -l${lib}")
      endif()
    endforeach()
  endif()
  set(NG_PC_LIBS_PRIVATE "${NG_PC_LIBS_PRIVATE}${flags}" PARENT_SCOPE)
endfunction()
get_filename_component(NG_DNNL_LIBDIR "${DNNL_LIBRARY}" DIRECTORY)
set(NG_PC_LIBS_PRIVATE "-L${NG_DNNL_LIBDIR} -ldnnl ${OpenMP_C_FLAGS} -lpthread -lm")
ng_pc_lib("${HWLOC_LIBRARY}" hwloc)
ng_pc_lib("${CJSON_LIBRARY}" libcjson)
ng_pc_lib("${MHD_LIBRARY}" libmicrohttpd)
list(GET ZLIB_LIBRARIES 0 NG_ZLIB_LIBRARY)
ng_pc_lib("${NG_ZLIB_LIBRARY}" zlib)
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
