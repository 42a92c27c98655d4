# Fails the build on an #include "folder/..." under src/ that reaches a higher layer.
#
# Run by the refit_layer_check target (CMakeLists.txt) before any library compiles:
#   cmake -DSOURCE_DIR=<repo> -DRANKS=<a|b|...> -DPRIVATE=<folder=layer,...|...>
#         -DALLOWLIST=<file> -DSTAMP=<file> -P check_layer_includes.cmake
# RANKS: the layers' folders lowest first; a file belongs to the longest one its folder
#   starts with (kernels/cpu/x.cpp to "kernels"), and may include its own rank and lower.
# PRIVATE: "kernels/cpu=kernels,cli,benchmarks": that folder's headers are included only
#   from those ranks (the CPU kernels are reached through the registry, not by name).
# ALLOWLIST: "src/<file> -> <included path>  # why" lines this check lets through.
# Written in CMake so that the check needs nothing the build does not already have.
cmake_minimum_required(VERSION 3.25)

string(REPLACE "|" ";" ranks "${RANKS}")
string(REPLACE "|" ";" private_rules "${PRIVATE}")

# The rank (index into `ranks`) of a folder relative to src/, or -1.
function(rank_of folder out_rank out_name)
  set(best -1)
  set(best_len -1)
  set(best_name "")
  set(index 0)
  foreach(prefix IN LISTS ranks)
    string(LENGTH "${prefix}" len)
    if((folder STREQUAL prefix OR folder MATCHES "^${prefix}/") AND len GREATER best_len)
      set(best ${index})
      set(best_len ${len})
      set(best_name "${prefix}")
    endif()
    math(EXPR index "${index} + 1")
  endforeach()
  set(${out_rank} ${best} PARENT_SCOPE)
  set(${out_name} "${best_name}" PARENT_SCOPE)
endfunction()

set(allowed "")
if(EXISTS "${ALLOWLIST}")
  file(STRINGS "${ALLOWLIST}" allow_lines REGEX "->")
  foreach(line IN LISTS allow_lines)
    if(line MATCHES "^[ \t]*([^ \t#]+)[ \t]*->[ \t]*([^ \t#]+)")
      list(APPEND allowed "${CMAKE_MATCH_1} -> ${CMAKE_MATCH_2}")
    endif()
  endforeach()
endif()
set(used_allowances "")

string(REPLACE ";" " < " order_text "${ranks}")
set(errors "")
file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/src/*.h" "${SOURCE_DIR}/src/*.cpp"
     "${SOURCE_DIR}/src/*.cu" "${SOURCE_DIR}/src/*.cuh")
list(SORT files)
foreach(file IN LISTS files)
  get_filename_component(dir "${file}" DIRECTORY)
  string(REGEX REPLACE "^src/?" "" dir "${dir}")
  rank_of("${dir}" from_rank from_name)
  if(from_rank EQUAL -1)
    list(APPEND errors "${file}: src/${dir} is in no layer: add it to REFIT_LAYER_ORDER in CMakeLists.txt")
    continue()
  endif()
  file(STRINGS "${SOURCE_DIR}/${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+/[^\"]+\"")
  foreach(include_line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" included "${include_line}")
    if(NOT EXISTS "${SOURCE_DIR}/src/${included}")
      continue()  # not one of refit's headers
    endif()
    get_filename_component(to_dir "${included}" DIRECTORY)
    rank_of("${to_dir}" to_rank to_name)
    set(rule "")
    if(to_rank EQUAL -1)
      set(rule "src/${to_dir} is in no layer: add it to REFIT_LAYER_ORDER in CMakeLists.txt")
    elseif(to_rank GREATER from_rank)
      set(rule "${from_name} may not include ${to_name}, a higher layer (lowest first: ${order_text})")
    else()
      foreach(private_rule IN LISTS private_rules)
        string(REGEX REPLACE "=.*$" "" private_folder "${private_rule}")
        string(REGEX REPLACE "^[^=]*=" "" private_users "${private_rule}")
        string(REPLACE "," ";" private_users "${private_users}")
        if((to_dir STREQUAL private_folder OR to_dir MATCHES "^${private_folder}/")
           AND NOT from_name IN_LIST private_users)
          string(REPLACE ";" ", " users_text "${private_users}")
          set(rule "${private_folder}/ is internal to its layer (only ${users_text} may include it)")
        endif()
      endforeach()
    endif()
    if(rule STREQUAL "")
      continue()
    endif()
    if("${file} -> ${included}" IN_LIST allowed)
      list(APPEND used_allowances "${file} -> ${included}")
      continue()
    endif()
    # The line number, for the message: count the newlines before the include.
    file(READ "${SOURCE_DIR}/${file}" content)
    string(FIND "${content}" "${include_line}" position)
    string(SUBSTRING "${content}" 0 ${position} before)
    string(REGEX MATCHALL "\n" newlines "${before}")
    list(LENGTH newlines line_number)
    math(EXPR line_number "${line_number} + 1")
    list(APPEND errors "${file}:${line_number}: #include \"${included}\": ${rule}")
  endforeach()
endforeach()

foreach(allowance IN LISTS allowed)
  if(NOT allowance IN_LIST used_allowances)
    message(WARNING "layer check: ${ALLOWLIST} lets through '${allowance}', which is no longer "
                    "an upward include: remove the line")
  endif()
endforeach()

if(errors)
  list(LENGTH errors count)
  string(REPLACE ";" "\n  " error_text "${errors}")
  message(FATAL_ERROR "layer check: ${count} include(s) against the layer order:\n  ${error_text}\n"
                      "Move the concept to the layer that owns it (or invert the dependency); an "
                      "exception goes in ${ALLOWLIST} with the reason.")
endif()
file(WRITE "${STAMP}" "layers ok\n")
