# warmkey_embed_sources(<out.cpp> <function> <root> <files...>): generates a C++ file defining
# `const warmkey::SourceSet& <function>()` that holds every file's text under its path relative to
# <root>, so NVRTC sees device headers by name and no file-system path reaches a key.
set(_WARMKEY_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/warmkey_embed_run.cmake)

function(warmkey_embed_sources out func root)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DFUNC=${func} -DROOT=${root} "-DFILES=${ARGN}" -P ${_WARMKEY_EMBED_SCRIPT}
    DEPENDS ${ARGN} ${_WARMKEY_EMBED_SCRIPT}
    COMMENT "Embedding device sources into ${out}"
    VERBATIM)
endfunction()
