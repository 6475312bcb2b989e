// The version of this build and the git commit it was built from, for
// every binary's --version.
#ifndef STRATA_COMMON_VERSION_H_
#define STRATA_COMMON_VERSION_H_

namespace strata {

// The project version of the top-level CMakeLists.txt ("0.5.0").
const char* StrataVersion();

// The commit checked out when this was built (12 hex digits), with "-dirty"
// where tracked files differed from it; "unknown" outside a git checkout.
// Refreshed at every build (common/write_version.cmake).
const char* StrataGitCommit();

}  // namespace strata

#endif  // STRATA_COMMON_VERSION_H_
