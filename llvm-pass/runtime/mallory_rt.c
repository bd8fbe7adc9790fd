/* The runtime the pass's hooks call: writes code events into the node's shared-memory ring.
 *
 * Safe by default: when MALLORY_SHM is unset, or names a segment that does not exist or is
 * not a ring of our version, every hook is a no-op and the program runs as if plain.
 * The mapping is MAP_SHARED, so a forked child keeps writing into its node's ring.
 * Protocol (claim, per-slot stamp, drops): llvm-pass/RING.md. */
#define _GNU_SOURCE
#include "mallory_ring.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

enum { RT_UNINIT = 0, RT_BUSY = 1, RT_READY = 2, RT_OFF = 3 };

static int rt_state = RT_UNINIT;
static struct mallory_ring_header *rt_header;
static struct mallory_ring_slot *rt_slots;
static uint64_t rt_mask;

static const char *shm_path_name(const char *env, char *buf, size_t len) {
    if (env[0] == '/')
        return env;
    if (strlen(env) + 2 > len)
        return NULL;
    buf[0] = '/';
    strcpy(buf + 1, env);
    return buf;
}

static void *map_existing(const char *env_name, size_t min_size, size_t *size_out) {
    const char *env = getenv(env_name);
    char buf[256];
    if (env == NULL || env[0] == '\0')
        return NULL;
    const char *name = shm_path_name(env, buf, sizeof buf);
    if (name == NULL)
        return NULL;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *mem = NULL;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= min_size) {
        mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED)
            mem = NULL;
        *size_out = (size_t)st.st_size;
    }
    close(fd);
    return mem;
}

static int ring_valid(const struct mallory_ring_header *h, size_t size) {
    uint64_t cap = h->capacity;
    return h->magic == MALLORY_RING_MAGIC && h->version == MALLORY_RING_VERSION &&
           h->slot_size == MALLORY_RING_SLOT_SIZE && h->header_size == MALLORY_RING_HEADER_SIZE &&
           cap != 0 && (cap & (cap - 1)) == 0 &&
           cap <= (size - MALLORY_RING_HEADER_SIZE) / MALLORY_RING_SLOT_SIZE;
}

static void rt_init(void) {
    int expected = RT_UNINIT;
    if (!__atomic_compare_exchange_n(&rt_state, &expected, RT_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* another thread is initialising (its events meanwhile are not recorded) */
    size_t size = 0;
    int state = RT_OFF;
    void *mem = map_existing("MALLORY_SHM", MALLORY_RING_HEADER_SIZE, &size);
    if (mem != NULL) {
        struct mallory_ring_header *h = mem;
        if (ring_valid(h, size)) {
            rt_header = h;
            rt_slots = (struct mallory_ring_slot *)((char *)mem + MALLORY_RING_HEADER_SIZE);
            rt_mask = h->capacity - 1;
            state = RT_READY;
        } else {
            munmap(mem, size);
        }
    }
    __atomic_store_n(&rt_state, state, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void rt_constructor(void) { rt_init(); }

static void ring_write(uint64_t id, uint32_t kind) {
    uint64_t pos = __atomic_fetch_add(&rt_header->write_counter, 1, __ATOMIC_SEQ_CST);
    /* The time is read after the claim: an event claimed after a reader read write_counter
     * then has ts >= the reader's clock at that read (RING.md "Completeness"). */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t ts = (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
    struct mallory_ring_slot *slot = &rt_slots[pos & rt_mask];
    uint64_t mine = (pos + 1) << 1;

    /* Take the slot: only over an older stamp. An older writer still busy on it gets a
     * short grace period, then is overtaken (its event is then lost, which the reader sees
     * as an overwritten position). A newer lap already there means our event is the lost one. */
    uint64_t cur = __atomic_load_n(&slot->stamp, __ATOMIC_ACQUIRE);
    int spins = 0;
    for (;;) {
        if ((cur >> 1) >= (pos + 1)) {
            __atomic_fetch_add(&rt_header->writer_drops, 1, __ATOMIC_RELAXED);
            return;
        }
        if ((cur & 1) && spins < 256) {
            spins++;
            __builtin_ia32_pause();
            cur = __atomic_load_n(&slot->stamp, __ATOMIC_ACQUIRE);
            continue;
        }
        if (__atomic_compare_exchange_n(&slot->stamp, &cur, mine | 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
    }
    __atomic_store_n(&slot->ts, ts, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->id, id, __ATOMIC_RELAXED);
    uint64_t kind_check = (uint64_t)kind | ((uint64_t)mallory_slot_check(ts, id, kind, pos) << 32);
    __atomic_store_n((uint64_t *)&slot->kind, kind_check, __ATOMIC_RELAXED);
    uint64_t busy = mine | 1;
    /* Fails only if a newer lap overtook us meanwhile: then the slot is theirs. */
    __atomic_compare_exchange_n(&slot->stamp, &busy, mine, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

__attribute__((visibility("default"))) void __mallory_event(uint64_t id, uint32_t kind) {
    int state = __atomic_load_n(&rt_state, __ATOMIC_ACQUIRE);
    if (__builtin_expect(state == RT_READY, 1)) {
        ring_write(id, kind);
        return;
    }
    if (state == RT_UNINIT) {
        rt_init();
        if (__atomic_load_n(&rt_state, __ATOMIC_ACQUIRE) == RT_READY)
            ring_write(id, kind);
    }
}
