// Command-line helpers shared by the daemons' main() functions.
#ifndef STRATA_COMMON_CLI_H_
#define STRATA_COMMON_CLI_H_

#include <cstring>
#include <string>
#include <vector>

namespace strata {

// Rewrites "--flag-name[=value]" to "--flag_name[=value]" so that the
// documented dashed spellings reach Abseil's flag parser, which only knows
// underscores. Arguments after a bare "--" are left alone. `storage` owns the
// rewritten strings; the returned vector points into it and argv.
inline std::vector<char*> NormalizeFlagDashes(int argc, char** argv,
                                              std::vector<std::string>* storage) {
  storage->reserve(argc);
  std::vector<char*> out;
  bool rest = false;
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    if (i == 0 || rest || std::strncmp(a, "--", 2) != 0) {
      out.push_back(argv[i]);
      continue;
    }
    if (std::strcmp(a, "--") == 0) {
      rest = true;
      out.push_back(argv[i]);
      continue;
    }
    std::string s(a);
    size_t end = s.find('=');
    if (end == std::string::npos) end = s.size();
    for (size_t k = 2; k < end; ++k) {
      if (s[k] == '-') s[k] = '_';
    }
    storage->push_back(std::move(s));
    out.push_back(storage->back().data());
  }
  return out;
}

}  // namespace strata

#endif  // STRATA_COMMON_CLI_H_
