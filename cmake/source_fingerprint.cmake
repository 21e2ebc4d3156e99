# A fingerprint of the sources that libbraid and its programs are built from, so that
# `pip install ./python` can tell whether a build tree's libbraid was built from this very
# tree (python/CMakeLists.txt) and reuse it instead of compiling it again.
#
# include() it for braid_source_fingerprint(), or run it as a script after a build:
#   cmake -DROOT=<source> -DSTAMP=<file> -DLIBRARY=<libbraid> -DPROGRAMS=<a|b> -DBUILD_TYPE=<t>
#         -P source_fingerprint.cmake
# which writes STAMP, a CMake file setting BRAID_STAMP_SHA256, BRAID_STAMP_BUILD_TYPE,
# BRAID_STAMP_LIBRARY and BRAID_STAMP_PROGRAMS. It is written after everything it names was
# built, so a library or program newer than it was rebuilt since (from other sources).

# The SHA-256 over the relative path and content of every file under the folders that go
# into libbraid and the programs, and of the top-level CMake files.
function(braid_source_fingerprint root out)
  set(_dirs src include transports topology cuda perf cmake)
  set(_files)
  foreach(_d ${_dirs})
    file(GLOB_RECURSE _found LIST_DIRECTORIES false RELATIVE ${root} ${root}/${_d}/*)
    list(APPEND _files ${_found})
  endforeach()
  list(APPEND _files CMakeLists.txt)
  list(FILTER _files EXCLUDE REGEX "(^|/)(__pycache__|\\.)")  # caches, editors' swap files
  list(SORT _files)
  set(_all "")
  foreach(_f ${_files})
    file(SHA256 ${root}/${_f} _h)
    string(APPEND _all "${_f} ${_h}\n")
  endforeach()
  string(SHA256 _sum "${_all}")
  set(${out} ${_sum} PARENT_SCOPE)
endfunction()

# Whether the build tree `build` holds a libbraid (and programs) built from exactly the
# sources under `root` with build type `type`: its stamp's fingerprint equals the tree's,
# and nothing it names is missing or was rebuilt after it. Sets _reuse (ON/OFF), _reuse_why,
# _reuse_library and _reuse_programs in the caller's scope.
function(braid_reusable_build root build type)
  set(_reuse OFF PARENT_SCOPE)
  set(_stamp ${build}/braid-build-stamp.cmake)
  if(NOT build OR NOT EXISTS ${_stamp})
    set(_reuse_why "no build stamp at '${_stamp}'" PARENT_SCOPE)
    return()
  endif()
  include(${_stamp})
  braid_source_fingerprint(${root} _sum)
  if(NOT _sum STREQUAL BRAID_STAMP_SHA256)
    set(_reuse_why "its sources differ from this tree's (rebuild it, or it is another tree's)" PARENT_SCOPE)
    return()
  endif()
  if(NOT BRAID_STAMP_BUILD_TYPE STREQUAL type)
    set(_reuse_why "it is a '${BRAID_STAMP_BUILD_TYPE}' build, not '${type}'" PARENT_SCOPE)
    return()
  endif()
  foreach(_f ${BRAID_STAMP_LIBRARY} ${BRAID_STAMP_PROGRAMS})
    if(NOT EXISTS ${_f})
      set(_reuse_why "${_f} is missing" PARENT_SCOPE)
      return()
    endif()
    if(${_f} IS_NEWER_THAN ${_stamp})
      set(_reuse_why "${_f} was rebuilt after the stamp" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(_reuse ON PARENT_SCOPE)
  set(_reuse_why "" PARENT_SCOPE)
  set(_reuse_library ${BRAID_STAMP_LIBRARY} PARENT_SCOPE)
  set(_reuse_programs ${BRAID_STAMP_PROGRAMS} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE AND DEFINED STAMP)
  braid_source_fingerprint(${ROOT} _sum)
  string(REPLACE "|" ";" PROGRAMS "${PROGRAMS}")  # '|'-separated on the command line
  file(WRITE ${STAMP}.tmp
       "set(BRAID_STAMP_SHA256 \"${_sum}\")\n"
       "set(BRAID_STAMP_BUILD_TYPE \"${BUILD_TYPE}\")\n"
       "set(BRAID_STAMP_LIBRARY \"${LIBRARY}\")\n"
       "set(BRAID_STAMP_PROGRAMS \"${PROGRAMS}\")\n")
  file(RENAME ${STAMP}.tmp ${STAMP})
endif()
