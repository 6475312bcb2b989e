// Replays files through a fuzz target without libFuzzer: every file named
// on the command line, and every regular file under each directory named
// (recursively, in sorted order), is passed once to LLVMFuzzerTestOneInput.
// A crash or a failed FUZZ_CHECK fails the run; the file being replayed is
// printed first so the failure names it. A directory that does not exist
// holds no inputs (a target without regression inputs yet). Exit status 0
// when every input ran, 1 on a usage or read error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

namespace {

namespace fs = std::filesystem;

bool Collect(const fs::path& path, std::vector<fs::path>* files) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    files->push_back(path);
    return true;
  }
  if (!fs::exists(path, ec)) {
    std::fprintf(stderr, "%s: does not exist; no inputs there\n",
                 path.c_str());
    return true;
  }
  if (!fs::is_directory(path, ec)) {
    std::fprintf(stderr, "%s: not a file or directory\n", path.c_str());
    return false;
  }
  std::vector<fs::path> found;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file(ec)) found.push_back(it->path());
  }
  if (ec) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), ec.message().c_str());
    return false;
  }
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 1;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (!Collect(argv[i], &files)) return 1;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read\n", file.c_str());
      return 1;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", file.c_str(),
                 bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
  std::printf("%zu inputs replayed without a finding\n", files.size());
  return 0;
}
