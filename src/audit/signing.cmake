# Signing keys, detached CMS signatures and signed audit bundles (issue 5). OpenSSL and
# libarchive stay private: the headers speak only strings and Status. libarchive is loaded on
# first use (common/libarchive.h), so only its headers are needed here.
add_library(sluice_audit_sign STATIC
  ${CMAKE_CURRENT_LIST_DIR}/signing_key.cc
  ${CMAKE_CURRENT_LIST_DIR}/openssl_util.cc
  ${CMAKE_CURRENT_LIST_DIR}/cms.cc
  ${CMAKE_CURRENT_LIST_DIR}/bundle_zip.cc
  ${CMAKE_CURRENT_LIST_DIR}/bundle.cc
  ${CMAKE_CURRENT_LIST_DIR}/tls_identity.cc)
target_link_libraries(sluice_audit_sign PUBLIC sluice_common
  PRIVATE OpenSSL::Crypto)
target_include_directories(sluice_audit_sign PRIVATE ${LibArchive_INCLUDE_DIRS})

# The tests also run the openssl and sha256sum command-line tools on bundles, to prove that a
# user can check one by hand.
sluice_test(audit_sign_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/signing_key_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/bundle_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/tls_identity_test.cc
  LIBS sluice_audit_sign)
