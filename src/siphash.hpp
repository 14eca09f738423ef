// SipHash-2-4 (Aumasson and Bernstein, 2012), a keyed hash: without the
// 128-bit key, nobody can choose inputs whose hashes collide.  The storage
// names each record by a 128-bit SipHash of its tenant, scope and key under
// a secret of the database (key_digest.hpp).
//
// Pure C++: this header and its source never include PostgreSQL's headers
// (boundary.hpp's first zone); nothing here throws or allocates.  Checked
// against the reference test vectors and against OpenSSL's SIPHASH
// (test/unit/siphash.cpp, run by test/t/025_siphash.pl; test/fuzz/siphash.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace idempotency::siphash
{

constexpr size_t key_size = 16;

// The 64-bit output, as the reference code writes it: little-endian bytes.
uint64_t hash64(const uint8_t (&key)[key_size], const void *data, size_t size);

// The 128-bit output (SipHash-2-4-128), in the reference's byte order: out[0..7]
// then out[8..15], each half little-endian.
void hash128(const uint8_t (&key)[key_size], const void *data, size_t size, uint8_t (&out)[16]);

} // namespace idempotency::siphash
