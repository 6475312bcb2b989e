#include "common/version.h"

// Written at build time into the build tree (common/write_version.cmake);
// only this file includes it, so a new commit recompiles only this file.
#include "strata_version.h"

namespace strata {

const char* StrataVersion() { return STRATA_VERSION; }

const char* StrataGitCommit() { return STRATA_GIT_COMMIT; }

}  // namespace strata
