/* The shared-memory ring between an instrumented SUT and its node's observer.
 * Byte layout and protocol: llvm-pass/RING.md (this header is its C transcription). */
#ifndef MALLORY_RING_H
#define MALLORY_RING_H

#include <stdint.h>

#define MALLORY_RING_MAGIC 0x474e495259524c4dULL /* "MLRYRING" read as a little-endian u64 */
#define MALLORY_RING_VERSION 1u
#define MALLORY_RING_HEADER_SIZE 128u
#define MALLORY_RING_SLOT_SIZE 32u

#define MALLORY_KIND_FUNC 1u
#define MALLORY_KIND_BLOCK 2u

struct mallory_ring_header {
    uint64_t magic;         /*  0 */
    uint32_t version;       /*  8 */
    uint32_t slot_size;     /* 12 */
    uint64_t capacity;      /* 16: number of slots, a power of two */
    uint32_t header_size;   /* 24: offset of slot 0 */
    uint32_t flags;         /* 28: 0 */
    uint64_t writer_drops;  /* 32: events writers abandoned because a newer lap owned the slot */
    uint64_t reader_cursor; /* 40: published by the reader: next position it will read */
    uint64_t reader_lost;   /* 48: published by the reader: events it lost so far */
    uint64_t reserved0;     /* 56 */
    uint64_t write_counter; /* 64: positions claimed so far; never reset (own cache line) */
    uint64_t reserved1[7];  /* 72..127 */
};

struct mallory_ring_slot {
    uint64_t ts;    /* CLOCK_MONOTONIC ns */
    uint64_t id;    /* code-event id */
    uint32_t kind;  /* mallory.timeline.event.Kind */
    uint32_t check; /* mallory_slot_check(ts, id, kind, position) */
    uint64_t stamp; /* ((position + 1) << 1) | busy; 0 = never written */
};

/* Ties a slot's payload to the position that wrote it, so a reader can tell a slot whose
 * fields come from two different writers (a torn slot) from a whole one. */
static inline uint32_t mallory_slot_check(uint64_t ts, uint64_t id, uint32_t kind, uint64_t pos) {
    uint64_t x = ts ^ ((id << 21) | (id >> 43)) ^ ((uint64_t)kind << 32) ^ pos;
    return (uint32_t)((x * 0x9E3779B97F4A7C15ULL) >> 32);
}

#ifdef __cplusplus
extern "C" {
#endif
/* The hook the pass inserts. A no-op unless MALLORY_SHM names a valid ring. */
void __mallory_event(uint64_t id, uint32_t kind);
#ifdef __cplusplus
}
#endif

#endif
