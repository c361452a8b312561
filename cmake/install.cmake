# `cmake --install BUILD --prefix PREFIX`: the minidl command, the static libraries, their headers
# and a CMake package, so another project can write
#   find_package(minidl REQUIRED)
#   target_link_libraries(app PRIVATE minidl::minidl)
# Headers go to PREFIX/include/minidl/<folder>/ and are included as "core/tensor.h",
# "layers/conv/conv2d.h", ... (the include root the libraries are built with). The package
# config finds the dependencies again (Eigen, nlohmann_json, OpenMP, Threads, protobuf, and the
# CUDA toolkit for a CUDA build). docs/library.md describes the API.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MINIDL_LIBRARIES minidl_core minidl_layers minidl_optim minidl_data minidl_distributed minidl_train minidl_profiling
                     minidl_export)
# minidl::minidl: everything a training program needs, in one name (the executable is `minidl`,
# so the target is minidl_library under the exported name minidl).
add_library(minidl_library INTERFACE)
target_link_libraries(minidl_library INTERFACE ${MINIDL_LIBRARIES})
set_target_properties(minidl_library PROPERTIES EXPORT_NAME minidl)
target_include_directories(minidl_core INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/minidl>)

install(TARGETS ${MINIDL_LIBRARIES} minidl_library EXPORT minidlTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minidl)
install(TARGETS minidl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(folder core layers optim data distributed train profiling export)
  # Plain C++ headers only: the .cuh files are the CUDA kernels' own.
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/${folder} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minidl
    FILES_MATCHING PATTERN "*.h")
endforeach()

set(MINIDL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/minidl)
install(EXPORT minidlTargets NAMESPACE minidl:: DESTINATION ${MINIDL_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/minidlConfig.cmake.in
  ${CMAKE_BINARY_DIR}/minidlConfig.cmake INSTALL_DESTINATION ${MINIDL_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/minidlConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/minidlConfig.cmake ${CMAKE_BINARY_DIR}/minidlConfigVersion.cmake
  DESTINATION ${MINIDL_CMAKE_DIR})
