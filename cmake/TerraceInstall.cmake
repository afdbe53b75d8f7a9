# Installation (issue 12, point 3): `cmake --install BUILD --prefix P` puts libterrace.so, the
# public headers (P/include/terrace/interp/..., tiers/...), the terrace CLI, a CMake package
# (find_package(Terrace): Terrace::terrace) and terrace.pc in place.
#
# One shared library, not the static ones: those need LLVM, Clang, oneDNN, TBB, ONNX, protobuf
# and OpenMP on the consumer's link line, in the right order, and the package and .pc file to
# find each. libterrace.so links the static libraries whole, and keeps those (all Debian shared
# libraries) as its own dependencies, so a C or C++ program links -lterrace alone.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TERRACE_STATIC_LIBS terrace_capi terrace_tiers terrace_guards terrace_kernels terrace_interp)
if(TARGET terrace_jit)
  list(APPEND TERRACE_STATIC_LIBS terrace_jit)
endif()
set(TERRACE_WHOLE_ARCHIVES "")
foreach(lib ${TERRACE_STATIC_LIBS})
  list(APPEND TERRACE_WHOLE_ARCHIVES $<TARGET_FILE:${lib}>)
endforeach()
file(WRITE ${PROJECT_BINARY_DIR}/terrace_shared.cpp "// libterrace.so: Terrace's static libraries, linked whole.\n")
add_library(terrace_shared SHARED ${PROJECT_BINARY_DIR}/terrace_shared.cpp)
# The archives whole (every public symbol in), then the targets again for their dependencies.
target_link_libraries(terrace_shared PRIVATE -Wl,--whole-archive ${TERRACE_WHOLE_ARCHIVES} -Wl,--no-whole-archive
                      ${TERRACE_STATIC_LIBS})
# Every symbol resolved at link time (sanitizer runtimes are the executable's: not checked there).
if(TERRACE_SANITIZE STREQUAL "" AND NOT TERRACE_FUZZ)
  target_link_options(terrace_shared PRIVATE -Wl,--no-undefined)
endif()
set_target_properties(terrace_shared PROPERTIES OUTPUT_NAME terrace EXPORT_NAME terrace
                      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
target_compile_features(terrace_shared INTERFACE cxx_std_20)
target_include_directories(terrace_shared INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/terrace>)
set_target_properties(terrace PROPERTIES EXPORT_NAME terrace_cli)

# The headers the public API includes (tiers/session.h, interp/graph_builder.h, capi/terrace_c.h
# and what they include; tools/examples/ builds against exactly these).
set(TERRACE_PUBLIC_HEADERS interp/dtypes.def interp/error.h interp/graph.h interp/graph_builder.h interp/half.h interp/float8.h
    interp/ops.def interp/tensor.h tiers/options.h tiers/partition.h tiers/session.h capi/terrace_c.h)
foreach(header ${TERRACE_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/terrace/${dir})
endforeach()

install(TARGETS terrace_shared EXPORT TerraceTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS terrace EXPORT TerraceTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# What the CLI reads besides models (tools/data_files.h): `bench --plot`'s script and
# `conformance`'s expected-failures lists and floors, under share/terrace.
install(FILES ${PROJECT_SOURCE_DIR}/tools/plot_bench.py DESTINATION ${CMAKE_INSTALL_DATADIR}/terrace)
file(GLOB TERRACE_CONFORMANCE_LISTS ${PROJECT_SOURCE_DIR}/tests/conformance_expected*.txt
     ${PROJECT_SOURCE_DIR}/tests/conformance_floor*.txt)
install(FILES ${TERRACE_CONFORMANCE_LISTS} DESTINATION ${CMAKE_INSTALL_DATADIR}/terrace/conformance)
set(TERRACE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Terrace)
install(EXPORT TerraceTargets NAMESPACE Terrace:: DESTINATION ${TERRACE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TerraceConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/TerraceConfig.cmake INSTALL_DESTINATION ${TERRACE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TerraceConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TerraceConfig.cmake ${PROJECT_BINARY_DIR}/TerraceConfigVersion.cmake
        DESTINATION ${TERRACE_CMAKE_DIR})
# terrace.pc finds the prefix from its own place (pcfiledir), so any --prefix works.
file(RELATIVE_PATH TERRACE_PC_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${PROJECT_SOURCE_DIR}/cmake/terrace.pc.in ${PROJECT_BINARY_DIR}/terrace.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/terrace.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
