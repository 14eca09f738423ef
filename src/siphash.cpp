#include "siphash.hpp"

#include <cstring>

#if !defined(__BYTE_ORDER__)
#error "siphash.cpp reads words by the compiler's __BYTE_ORDER__"
#endif

// Pure C++ (boundary.hpp's first zone): no PostgreSQL header may come in.
#if defined(C_H) || defined(PG_VERSION_NUM)
#error "siphash.cpp is pure C++: a PostgreSQL header is included (see boundary.hpp)"
#endif

namespace idempotency::siphash
{
namespace
{

inline uint64_t rotate(uint64_t x, int bits)
{
    return (x << bits) | (x >> (64 - bits));
}

// Little-endian words, read as one load where the machine is little-endian.
inline uint64_t load_le(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

inline void store_le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = uint8_t(v);
}

struct State
{
    uint64_t v0, v1, v2, v3;

    void round()
    {
        v0 += v1;
        v1 = rotate(v1, 13);
        v1 ^= v0;
        v0 = rotate(v0, 32);
        v2 += v3;
        v3 = rotate(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotate(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotate(v1, 17);
        v1 ^= v2;
        v2 = rotate(v2, 32);
    }

    // c = 2 rounds per message word.
    void absorb(uint64_t m)
    {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }

    // d = 4 rounds.
    uint64_t finish()
    {
        round();
        round();
        round();
        round();
        return v0 ^ v1 ^ v2 ^ v3;
    }
};

// Initialisation and compression, common to both outputs: the 128-bit one
// differs in its initial v1 and its finalisation constants.
State compress(const uint8_t (&key)[key_size], const void *data, size_t size, bool wide)
{
    uint64_t k0 = load_le(key), k1 = load_le(key + 8);
    State s = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
               k1 ^ 0x7465646279746573ULL};
    if (wide)
        s.v1 ^= 0xee;
    const uint8_t *in = static_cast<const uint8_t *>(data);
    size_t whole = size - size % 8;
    for (size_t i = 0; i < whole; i += 8)
        s.absorb(load_le(in + i));
    // The last word: the remaining bytes, and the length's low byte on top.
    uint8_t tail[8] = {};
    memcpy(tail, in + whole, size % 8);
    tail[7] = uint8_t(size);
    s.absorb(load_le(tail));
    s.v2 ^= wide ? 0xee : 0xff;
    return s;
}

} // namespace

uint64_t hash64(const uint8_t (&key)[key_size], const void *data, size_t size)
{
    return compress(key, data, size, false).finish();
}

void hash128(const uint8_t (&key)[key_size], const void *data, size_t size, uint8_t (&out)[16])
{
    State s = compress(key, data, size, true);
    store_le(out, s.finish());
    s.v1 ^= 0xdd;
    store_le(out + 8, s.finish());
}

} // namespace idempotency::siphash
