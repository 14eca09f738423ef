// A one-entry memo of what a backend computed last for one key (tenant,
// scope, key): a request's begin and complete work on the same key, each
// needing the same derived value (its digest, its shared-claims tag).  The
// owner decides when an entry may be kept and when it must be forgotten
// (key_digest.cpp and shared_claims.cpp say why theirs are safe); the memo
// only compares the key's bytes in full, so a hit is the same key.  A memo of
// a scope alone passes no key (nullptr).
#pragma once

#include "compat.hpp" // the varlena macros (varatt.h from PostgreSQL 16 on)

#include <cstring>

namespace idempotency
{

template <typename Value> class LastKey
{
  public:
    // The value remembered for this key, if the memo holds it.
    bool find(int64 tenant, const text *scope, const text *key, Value *value) const
    {
        uint32 scope_size = VARSIZE_ANY_EXHDR(scope), key_size = key ? VARSIZE_ANY_EXHDR(key) : 0;
        if (!valid || tenant != tenant_ || scope_size != scope_size_ || key_size != key_size_ ||
            memcmp(bytes_, VARDATA_ANY(scope), scope_size) != 0 ||
            (key && memcmp(bytes_ + scope_size, VARDATA_ANY(key), key_size) != 0))
            return false;
        *value = value_;
        return true;
    }

    // Remembers `value` for this key, in place of the last one; a key too
    // long for the memo's room is not kept (the memo is then empty).
    void remember(int64 tenant, const text *scope, const text *key, const Value &value)
    {
        uint32 scope_size = VARSIZE_ANY_EXHDR(scope), key_size = key ? VARSIZE_ANY_EXHDR(key) : 0;
        valid = false;
        if (size_t(scope_size) + key_size > room)
            return;
        tenant_ = tenant;
        scope_size_ = scope_size;
        key_size_ = key_size;
        memcpy(bytes_, VARDATA_ANY(scope), scope_size);
        if (key)
            memcpy(bytes_ + scope_size, VARDATA_ANY(key), key_size);
        value_ = value;
        valid = true;
    }

    void forget() { valid = false; }

  private:
    static constexpr size_t room = 256;
    bool valid = false;
    int64 tenant_ = 0;
    uint32 scope_size_ = 0;
    uint32 key_size_ = 0;
    uint8 bytes_[room] = {}; // the scope, then the key
    Value value_ = {};
};

} // namespace idempotency
