# Tests cmake/source_fingerprint.cmake, which decides whether `pip install ./python` reuses a
# build tree's libbraid: a stamp written after a build of a tree is accepted for that tree
# and refused, with the reason, when a source changes, a file is added, the build type
# differs, or a stamped file is missing or newer than the stamp.
#   cmake -DREPO=<braid source> -DWORK=<scratch folder> -P source_fingerprint_test.cmake
include(${REPO}/cmake/source_fingerprint.cmake)

set(root ${WORK}/tree)
set(build ${WORK}/build)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${root}/src/api ${root}/perf ${root}/include ${build})
file(WRITE ${root}/CMakeLists.txt "project(x)\n")
file(WRITE ${root}/src/api/a.cc "int a() { return 1; }\n")
file(WRITE ${root}/perf/p.cc "int main() {}\n")
file(WRITE ${root}/include/x.h "#pragma once\n")
file(WRITE ${root}/README.md "not a source\n")

function(stamp)
  file(WRITE ${build}/libbraid.so "lib")
  file(WRITE ${build}/prog "prog")
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -DSTAMP=${build}/braid-build-stamp.cmake
                          -DLIBRARY=${build}/libbraid.so -DPROGRAMS=${build}/prog|${build}/prog
                          -DBUILD_TYPE=Release -P ${REPO}/cmake/source_fingerprint.cmake
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "writing the stamp failed: ${rc}")
  endif()
endfunction()

# expect(ON|OFF [reason substring])
function(expect want)
  braid_reusable_build(${root} ${build} Release)
  if(NOT _reuse STREQUAL want)
    message(FATAL_ERROR "reuse is ${_reuse}, expected ${want} (${_reuse_why})")
  endif()
  if(ARGC GREATER 1)
    string(FIND "${_reuse_why}" "${ARGV1}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "reason '${_reuse_why}' does not say '${ARGV1}'")
    endif()
  endif()
  message(STATUS "reuse ${_reuse} ${_reuse_why}")
endfunction()

expect(OFF "no build stamp")
stamp()
expect(ON)
braid_reusable_build(${root} ${build} Release)
if(NOT _reuse_library STREQUAL "${build}/libbraid.so" OR NOT _reuse_programs STREQUAL "${build}/prog;${build}/prog")
  message(FATAL_ERROR "stamped files: '${_reuse_library}' '${_reuse_programs}'")
endif()

file(WRITE ${root}/README.md "still not a source\n")  # outside the source folders
expect(ON)
file(WRITE ${root}/src/api/a.cc "int a() { return 2; }\n")
expect(OFF "sources differ")
file(WRITE ${root}/src/api/a.cc "int a() { return 1; }\n")
expect(ON)
file(WRITE ${root}/src/api/new.cc "\n")
expect(OFF "sources differ")
file(REMOVE ${root}/src/api/new.cc)
expect(ON)
file(WRITE ${root}/CMakeLists.txt "project(y)\n")
expect(OFF "sources differ")
file(WRITE ${root}/CMakeLists.txt "project(x)\n")
expect(ON)

braid_reusable_build(${root} ${build} Debug)
if(_reuse OR NOT _reuse_why MATCHES "'Release' build, not 'Debug'")
  message(FATAL_ERROR "a Release stamp taken for a Debug build: ${_reuse} ${_reuse_why}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 0.05)
file(TOUCH ${build}/prog)  # rebuilt after the stamp (from other sources, say)
expect(OFF "rebuilt after the stamp")
stamp()
expect(ON)
file(REMOVE ${build}/libbraid.so)
expect(OFF "is missing")
message(STATUS "source fingerprint: all checks passed")
