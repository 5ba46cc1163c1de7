# warmkey_embed_sources(<out.cpp> <function> <roots> <files...>): generates a C++ file defining
# `const warmkey::SourceSet& <function>()` (namespace warmkey) that holds every file's text under
# its path relative to the first of <roots> (a path or a ;-list) that contains it, so NVRTC sees device headers by name and no file-system path reaches
# a key. Installed with the package: a project embeds its own kernels' .cuh files the same way and
# names the set in its KernelDef.
function(warmkey_embed_sources out func root)
  set(script ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/warmkey_embed_run.cmake)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DFUNC=${func} "-DROOT=${root}" "-DFILES=${ARGN}" -P ${script}
    DEPENDS ${ARGN} ${script}
    COMMENT "Embedding device sources into ${out}"
    VERBATIM)
endfunction()
