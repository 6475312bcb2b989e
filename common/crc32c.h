// CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), as used by
// iSCSI, ext4, LevelDB and gRPC. Checksums checkpoint payloads.
#ifndef STRATA_COMMON_CRC32C_H_
#define STRATA_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace strata {

// Returns the CRC32C of `data[0, n)` continued from `crc`, the CRC32C of the
// bytes that precede it (0 for none), so that
//   Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a followed by b).
// Uses the SSE4.2 crc32 instruction where the CPU has it, else a portable
// slicing-by-8 table. Thread-safe; `data` may be null when `n` is 0.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The portable table implementation; same contract as Crc32c. Exposed so
// tests can compare both paths.
uint32_t Crc32cSoftware(const void* data, size_t n, uint32_t crc = 0);

// True when Crc32c uses the SSE4.2 instruction on this CPU.
bool Crc32cHardwareAvailable();

// The SSE4.2 implementation; same contract as Crc32c. Only valid when
// Crc32cHardwareAvailable(); otherwise it falls back to Crc32cSoftware.
uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc = 0);

}  // namespace strata

#endif  // STRATA_COMMON_CRC32C_H_
