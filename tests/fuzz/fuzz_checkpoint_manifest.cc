// Fuzzes the checkpoint reader: the input is written as manifest.json into
// a scratch checkpoint directory beside fixed payload files, and restored
// into a store, which reads and verifies the manifest (ReadCheckpoint) and
// rebuilds each variable from its entry and metadata
// (Variable::FromCheckpoint). Payload files in the directory:
//   0.bin  16 bytes  (f32 [4] or [2,2], i64 [2], ...), 1.bin 16 bytes,
//   2.bin  0 bytes,  3.bin 48 bytes;
// their CRC32C values are in the seed manifests. Invariant: a restore that
// succeeds leaves the store holding the manifest's variables, each found
// under its own name and the size its dtype and shape say.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "server/variable_store.h"
#include "tests/fuzz/fuzz_sandbox.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/ps_fixture.h"

namespace {

using namespace strata;

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FUZZ_CHECK(out.good(), "cannot write " + path);
}

// The checkpoint directory with its payload files, made once.
const std::string& CheckpointDir() {
  static const std::string dir = [] {
    const std::string d = fuzz::GetSandbox().path() + "/ckpt";
    std::filesystem::create_directories(d);
    std::string floats;
    for (float f : {0.5f, -1.0f, 2.0f, 0.25f}) {
      floats.append(reinterpret_cast<const char*>(&f), sizeof(f));
    }
    WriteFile(d + "/0.bin", floats);
    WriteFile(d + "/1.bin", std::string(16, '\0'));
    WriteFile(d + "/2.bin", "");
    WriteFile(d + "/3.bin", std::string(48, '\x01'));
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = CheckpointDir();
  WriteFile(dir + "/manifest.json",
            std::string(reinterpret_cast<const char*>(data), size));
  VariableStoreOptions options;
  options.max_variable_bytes = fuzz::kFuzzMaxVariableBytes;
  VariableStore store(options);
  absl::StatusOr<int64_t> restored = store.Restore(dir);
  FUZZ_TRACE("restore: %s", restored.status().ToString().c_str());
  if (!restored.ok()) return 0;
  FUZZ_CHECK(*restored == static_cast<int64_t>(store.List().size()),
             "restored count");
  for (const auto& v : store.List()) {
    absl::StatusOr<std::shared_ptr<Variable>> found = store.Get(v->name());
    FUZZ_CHECK(found.ok() && *found == v,
               "restored variable '" + v->name() + "' is not found by its name");
    VariableSnapshot snap = v->Snapshot();
    FUZZ_CHECK(snap.value->size() == v->byte_size() &&
                   v->byte_size() == static_cast<size_t>(NumElements(v->shape())) *
                                         DTypeSize(v->dtype()),
               "restored variable size");
  }
  return 0;
}
