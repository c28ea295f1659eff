# Runs PYTHON SCRIPT 4 10 and fails unless it prints exactly the file EXPECTED.
execute_process(COMMAND ${PYTHON} ${SCRIPT} 4 10 OUTPUT_VARIABLE written RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${SCRIPT} failed (${status})")
endif()
file(READ ${EXPECTED} expected)
if(NOT written STREQUAL expected)
  message(FATAL_ERROR "${EXPECTED} is not what ${SCRIPT} 4 10 writes; regenerate it")
endif()
