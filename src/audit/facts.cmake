# Fingerprints, the driver/CUDA/PyTorch compatibility tables and the server's verification rules
# (issue 5 items 1-3). Pure logic over common's types; the tests parse real nvidia-smi fixtures
# with the agent's parser (a test-only dependency).

# data/cuda_driver_compat.csv and data/torch_cuda_builds.csv are compiled in, as market does with
# gpu_specs.csv: the product never reads the source tree at run time. Editing a CSV re-runs CMake;
# the text goes into a raw string literal whose delimiter must not occur in the data.
set(AUDIT_COMPAT_GEN ${CMAKE_CURRENT_BINARY_DIR}/compat_data.cc)
string(CONCAT AUDIT_COMPAT_TEXT
  "// Generated from data/*.csv by src/audit/facts.cmake; do not edit.\n"
  "#include \"audit/compat.h\"\n\nnamespace sluice::audit {\n\n")
foreach(pair kCudaDriverCompatCsv=cuda_driver_compat.csv kTorchCudaBuildsCsv=torch_cuda_builds.csv)
  string(REPLACE "=" ";" pair_list ${pair})
  list(GET pair_list 0 var)
  list(GET pair_list 1 file)
  set(csv ${CMAKE_CURRENT_SOURCE_DIR}/../../data/${file})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${csv})
  file(READ ${csv} csv_text)
  string(FIND "${csv_text}" ")sluice_csv\"" delim_pos)
  if(NOT delim_pos EQUAL -1)
    message(FATAL_ERROR "data/${file} contains the raw-string delimiter )sluice_csv\"")
  endif()
  string(APPEND AUDIT_COMPAT_TEXT
    "const std::string_view ${var} = R\"sluice_csv(${csv_text})sluice_csv\";\n\n")
endforeach()
string(APPEND AUDIT_COMPAT_TEXT "}  // namespace sluice::audit\n")
file(WRITE ${AUDIT_COMPAT_GEN}.tmp "${AUDIT_COMPAT_TEXT}")
# COPYONLY rewrites the output only when the content changed, so reconfigures do not rebuild.
configure_file(${AUDIT_COMPAT_GEN}.tmp ${AUDIT_COMPAT_GEN} COPYONLY)

add_library(sluice_audit_facts STATIC fingerprint.cc compat.cc verification.cc ${AUDIT_COMPAT_GEN})
target_link_libraries(sluice_audit_facts PUBLIC sluice_common)

sluice_test(audit_facts_test SOURCES fingerprint_test.cc compat_test.cc verification_test.cc
  LIBS sluice_audit_facts sluice_agent_probe)
