# clattn_install_tool(target): installs a command-line tool into the bin directory with an
# RPATH that finds libclattn in the installed lib directory from the tool's own place
# ($ORIGIN/../lib or its multiarch form), so installed tools start without LD_LIBRARY_PATH
# and the prefix stays relocatable.
function(clattn_install_tool target)
  file(RELATIVE_PATH to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${to_lib}")
  install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
