/* Clock and disk faults for one node's SUT, switched at run time: an LD_PRELOAD shim.
 *
 * Network namespaces share one kernel clock and one page cache, so these faults are
 * enacted inside the SUT process. The shim maps the node's control file (path in
 * $MALLORY_FAULT_CONTROL, written by nemesis/faults/controls.py) once, at load, and reads
 * it on every call it wraps: a fault switched there takes effect at the SUT's next call,
 * and while nothing is switched on a call costs one memory load.
 *
 * Clock: clock_gettime(CLOCK_REALTIME[_COARSE], CLOCK_TAI), gettimeofday and time return
 * the true time plus the control's offset. Monotonic clocks are left alone, as with a real
 * wall-clock jump.
 * Disk: while a disk fault is on, write/pwrite/writev/pwritev/fsync/fdatasync on a REGULAR
 * file under the control's prefix (the node's data directory; empty = any regular file)
 * fail with the control's errno (EIO, ENOSPC, ...) or are delayed by delay_us. Sockets,
 * pipes and terminals are never touched. stdio streams: libc writes their buffers
 * internally, out of an interposer's reach, so the fault is injected where a program sees
 * stdio's write errors: fflush and fclose of a stream with pending output discard that
 * output and fail (a stream that fills its buffer and writes on its own is not caught).
 * Kernel AIO: programs that submit writes with io_submit through libc's syscall() (libraft
 * writes its log segments so, O_DSYNC, with or without O_DIRECT) get the same faults per
 * request: a faulty write or fsync iocb is not submitted, and its completion, with the
 * fault's errno as its result, is handed out by the next io_getevents on its context (and
 * its eventfd signalled when it asked for one), as a failing disk would complete it; slow
 * I/O delays the submission. A write to an O_DSYNC/O_SYNC file (or with RWF_DSYNC/RWF_SYNC)
 * is a write and a sync, so fsync faults hit it too. libaio's inline system calls do not
 * pass through syscall(), nor do io_pgetevents and io_uring: those programs are not covered.
 * Unsynced writes: while tracking is on, the shim records for every regular file under the
 * tracking prefix the lowest offset written since its last fsync/fdatasync (sync/syncfs
 * clear everything), so after killing the SUT the nemesis can cut each file back to what
 * was synced: a crash that loses the page cache, which namespaces alone cannot lose.
 * Each faked clock read and each injected disk error or delay is counted in the control
 * file, so the nemesis can read back that the SUT itself received the fault.
 * Crashes: a SUT that dies of SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT with no handler of
 * its own first writes a backtrace into its output (so into the node's log), then dies of
 * the same signal; mallory/oracles/logs.py reads it (crash_backtrace):
 *    ==mallory== caught SIGSEGV: backtrace of pid 1234, innermost first
 *    ==mallory== #1 0x55d0c0de1234 /path/raft-kv+0x1234 (dynamic_symbol+0x1d)
 *    ==mallory== end of backtrace
 * (module+offset for an offline symbolizer; the symbol only when the object exports one).
 *
 * Reach: programs that make these calls through the dynamic linker (C/C++ SUTs such as
 * Redis, libraft servers and the example SUT, CPython). Statically linked programs (Go:
 * etcd) do not pass through it. Buffered AIO writes (no O_DSYNC, no O_DIRECT) are tracked
 * as unsynced like write(2); an AIO fsync that completes clears its file.
 *
 * No allocation and no lazy dlsym on any wrapped path: the real functions are resolved in
 * the constructor, and a call that arrives before (an allocator such as jemalloc reading
 * the clock while it initialises) goes straight to the system call. Debian's libfaketime
 * 0.9.10 aborts in exactly that situation under Redis 7 (jemalloc), hence this shim.
 *
 * Control file layout (little endian, 4096 bytes):
 *    0  u32 magic "MFLT"        4  u32 version (1)
 *    8  u32 disk mode (0 off, 1 error, 2 slow)
 *   12  i32 err (errno for mode 1)
 *   16  u32 ops (bit 0: write family, bit 1: fsync/fdatasync)
 *   20  u32 delay_us (mode 2)
 *   24  u64 disk_injected (incremented by the shim)
 *   32  char prefix[256] (NUL-terminated)
 *  288  i64 clock_offset_ns
 *  296  u64 clock_faked (reads that returned an offset time, incremented by the shim)
 *  304  u32 track (1: record unsynced writes)
 *  308  u32 lock (pid of the shim holding the table, 0 when free)
 *  312  u32 entries in use (at most 64)
 *  316  u32 untracked (files not recorded because the table was full)
 *  320  64 x {u64 dev, u64 ino, i64 lowest unsynced offset}
 * 1856  char track_prefix[256] (NUL-terminated)
 * 2112  u64 aio_injected (the part of disk_injected that hit AIO requests, by the shim)
 * The writer turns the disk mode off, changes the other disk fields, then sets the mode.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CTL_MAGIC 0x544c464du /* "MFLT" */
#define CTL_VERSION 1u
#define CTL_SIZE 4096
#define MODE_OFF 0u
#define MODE_ERROR 1u
#define MODE_SLOW 2u
#define OP_WRITE 1u
#define OP_SYNC 2u

struct control {
    uint32_t magic;
    uint32_t version;
    uint32_t mode;
    int32_t err;
    uint32_t ops;
    uint32_t delay_us;
    uint64_t disk_injected;
    char prefix[256];
    int64_t clock_offset_ns;
    uint64_t clock_faked;
    uint32_t track;
    uint32_t lock;
    uint32_t used;
    uint32_t untracked;
    struct unsynced {
        uint64_t dev;
        uint64_t ino;
        int64_t lowest;
    } table[64];
    char track_prefix[256];
    uint64_t aio_injected;
};

_Static_assert(offsetof(struct control, clock_offset_ns) == 288, "control layout");
_Static_assert(offsetof(struct control, table) == 320, "control layout");
_Static_assert(offsetof(struct control, track_prefix) == 1856, "control layout");
_Static_assert(offsetof(struct control, aio_injected) == 2112, "control layout");
_Static_assert(sizeof(struct control) <= CTL_SIZE, "control layout");

static struct control *ctl;

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_fflush)(FILE *);
static int (*real_fclose)(FILE *);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static long (*real_syscall)(long, ...);

static void refresh_pid(void);
static void catch_crashes(void);

__attribute__((constructor)) static void init(void) {
    refresh_pid();
    pthread_atfork(NULL, NULL, refresh_pid);
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_fflush = dlsym(RTLD_NEXT, "fflush");
    real_fclose = dlsym(RTLD_NEXT, "fclose");
    real_sync = dlsym(RTLD_NEXT, "sync");
    real_syncfs = dlsym(RTLD_NEXT, "syncfs");
    real_syscall = dlsym(RTLD_NEXT, "syscall");

    const char *path = getenv("MALLORY_FAULT_CONTROL");
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    void *mem = mmap(NULL, CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED)
        return;
    struct control *c = mem;
    if (c->magic != CTL_MAGIC || c->version != CTL_VERSION) {
        munmap(mem, CTL_SIZE);
        return;
    }
    __atomic_store_n(&ctl, c, __ATOMIC_RELEASE);
    catch_crashes();
}

static struct control *control(void) { return __atomic_load_n(&ctl, __ATOMIC_ACQUIRE); }

/* -- clock ------------------------------------------------------------------------------ */

static int64_t clock_offset(void) {
    struct control *c = control();
    if (c == NULL)
        return 0;
    int64_t off = __atomic_load_n(&c->clock_offset_ns, __ATOMIC_RELAXED);
    if (off != 0)
        __atomic_add_fetch(&c->clock_faked, 1, __ATOMIC_RELAXED);
    return off;
}

static void shift(struct timespec *ts, int64_t off) {
    int64_t ns = (int64_t)ts->tv_nsec + off % 1000000000LL;
    int64_t s = (int64_t)ts->tv_sec + off / 1000000000LL;
    if (ns < 0) {
        ns += 1000000000LL;
        s -= 1;
    } else if (ns >= 1000000000LL) {
        ns -= 1000000000LL;
        s += 1;
    }
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)ns;
}

static int is_wall_clock(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real_clock_gettime ? real_clock_gettime(id, ts) : (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && is_wall_clock(id)) {
        int64_t off = clock_offset();
        if (off != 0)
            shift(ts, off);
    }
    return rc;
}

/* glibc declares tv nonnull, but callers do pass NULL (for the zone only). */
#pragma GCC diagnostic ignored "-Wnonnull-compare"
int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    int rc = real_gettimeofday ? real_gettimeofday(tv, tz) : (int)syscall(SYS_gettimeofday, tv, tz);
    if (rc == 0 && tv != NULL) {
        int64_t off = clock_offset();
        if (off != 0) {
            struct timespec ts = {tv->tv_sec, tv->tv_usec * 1000L};
            shift(&ts, off);
            tv->tv_sec = ts.tv_sec;
            tv->tv_usec = ts.tv_nsec / 1000L;
        }
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

/* -- disk ------------------------------------------------------------------------------- */

/* Is the file open on fd (stat'ed as st) under prefix? Reading the fd's path costs ~8 us,
 * so verdicts are cached per process by inode and prefix. Racing threads may clobber an
 * entry; the worst outcome is one call judged as if the cache missed or was stale. */
struct verdict {
    uint64_t dev, ino, prefix_hash;
    int under;
};
static struct verdict verdicts[256];

static uint64_t hash_prefix(const char *prefix, size_t size) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < size && prefix[i]; i++)
        h = (h ^ (unsigned char)prefix[i]) * 1099511628211ULL;
    return h;
}

static int under(const char *prefix, size_t size, int fd, const struct stat *st) {
    if (prefix[0] == '\0')
        return 1;
    uint64_t h = hash_prefix(prefix, size);
    struct verdict *v = &verdicts[((uint64_t)st->st_ino * 31u + (uint64_t)st->st_dev) % 256u];
    if (v->ino == (uint64_t)st->st_ino && v->dev == (uint64_t)st->st_dev && v->prefix_hash == h)
        return v->under;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    size_t plen = strnlen(prefix, size);
    int result = n >= 0 && (size_t)n >= plen && memcmp(path, prefix, plen) == 0;
    *v = (struct verdict){(uint64_t)st->st_dev, (uint64_t)st->st_ino, h, result};
    return result;
}

/* The lock holds its holder's pid, so a holder killed inside the (short) critical section
 * does not hang every later writer: its lock is taken over once the pid is gone. */
/* The disk mode applying to a call of kind `op` on fd (MODE_OFF if none). */
static uint32_t targeted(struct control *c, int fd, uint32_t op) {
    uint32_t mode = __atomic_load_n(&c->mode, __ATOMIC_ACQUIRE);
    if (mode == MODE_OFF || (c->ops & op) == 0)
        return MODE_OFF;
    int saved = errno;
    struct stat st;
    uint32_t result = MODE_OFF;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && under(c->prefix, sizeof c->prefix, fd, &st))
        result = mode;
    errno = saved;
    return result;
}

/* -- unsynced writes ------------------------------------------------------------------- */

static uint32_t my_pid; /* getpid() is a system call: cached, refreshed in a forked child */

static void refresh_pid(void) { my_pid = (uint32_t)getpid(); }

static void lock(struct control *c) {
    uint32_t me = my_pid ? my_pid : (uint32_t)getpid();
    for (unsigned spins = 1;; spins++) {
        uint32_t holder = 0;
        if (__atomic_compare_exchange_n(&c->lock, &holder, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        if (spins % 1024 == 0 && kill((pid_t)holder, 0) != 0 && errno == ESRCH &&
            __atomic_compare_exchange_n(&c->lock, &holder, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        sched_yield();
    }
}

static void unlock(struct control *c) { __atomic_store_n(&c->lock, 0u, __ATOMIC_RELEASE); }

/* Record that fd is about to be written at `offset` (-1: at its current position). */
static void track_write(int fd, int64_t offset) {
    struct control *c = control();
    if (c == NULL || !__atomic_load_n(&c->track, __ATOMIC_ACQUIRE))
        return;
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !under(c->track_prefix, sizeof c->track_prefix, fd, &st)) {
        errno = saved;
        return;
    }
    if (offset < 0) {
        int flags = fcntl(fd, F_GETFL);
        offset = (flags >= 0 && (flags & O_APPEND)) ? (int64_t)st.st_size : (int64_t)lseek(fd, 0, SEEK_CUR);
        if (offset < 0)
            offset = 0;
    }
    lock(c);
    uint32_t i;
    for (i = 0; i < c->used; i++)
        if (c->table[i].dev == (uint64_t)st.st_dev && c->table[i].ino == (uint64_t)st.st_ino)
            break;
    if (i < c->used) {
        if (offset < c->table[i].lowest)
            c->table[i].lowest = offset;
    } else if (c->used < 64) {
        c->table[c->used] = (struct unsynced){(uint64_t)st.st_dev, (uint64_t)st.st_ino, offset};
        c->used++;
    } else {
        c->untracked++;
    }
    unlock(c);
    errno = saved;
}

/* fd's data reached the disk: forget its unsynced writes (fd < 0: every file's). */
static void track_synced(int fd) {
    struct control *c = control();
    if (c == NULL || !__atomic_load_n(&c->track, __ATOMIC_ACQUIRE))
        return;
    int saved = errno;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) != 0) {
        errno = saved;
        return;
    }
    lock(c);
    for (uint32_t i = 0; i < c->used;) {
        if (fd < 0 || (c->table[i].dev == (uint64_t)st.st_dev && c->table[i].ino == (uint64_t)st.st_ino)) {
            c->table[i] = c->table[--c->used];
        } else {
            i++;
        }
    }
    unlock(c);
    errno = saved;
}

/* Apply a disk fault to a call of kind `op` on fd: MODE_ERROR when the call must fail
 * (errno set), MODE_SLOW after the delay, MODE_OFF when no fault applies. */
static uint32_t inject(int fd, uint32_t op) {
    struct control *c = control();
    if (c == NULL)
        return MODE_OFF;
    uint32_t mode = targeted(c, fd, op);
    if (mode == MODE_OFF)
        return MODE_OFF;
    __atomic_add_fetch(&c->disk_injected, 1, __ATOMIC_RELAXED);
    if (mode == MODE_ERROR) {
        errno = c->err ? c->err : EIO;
        return MODE_ERROR;
    }
    int saved = errno;
    uint32_t us = c->delay_us;
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    errno = saved;
    return MODE_SLOW;
}

ssize_t write(int fd, const void *buf, size_t count) {
    if (inject(fd, OP_WRITE) == MODE_ERROR)
        return -1;
    track_write(fd, -1);
    return real_write ? real_write(fd, buf, count) : syscall(SYS_write, fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (inject(fd, OP_WRITE) == MODE_ERROR)
        return -1;
    track_write(fd, (int64_t)offset);
    return real_pwrite ? real_pwrite(fd, buf, count, offset) : syscall(SYS_pwrite64, fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    if (inject(fd, OP_WRITE) == MODE_ERROR)
        return -1;
    track_write(fd, (int64_t)offset);
    return real_pwrite64 ? real_pwrite64(fd, buf, count, offset) : syscall(SYS_pwrite64, fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    if (inject(fd, OP_WRITE) == MODE_ERROR)
        return -1;
    track_write(fd, -1);
    return real_writev ? real_writev(fd, iov, iovcnt) : syscall(SYS_writev, fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    if (inject(fd, OP_WRITE) == MODE_ERROR)
        return -1;
    track_write(fd, (int64_t)offset);
    return real_pwritev ? real_pwritev(fd, iov, iovcnt, offset) : syscall(SYS_pwritev, fd, iov, iovcnt, offset, 0);
}

int fsync(int fd) {
    if (inject(fd, OP_SYNC) == MODE_ERROR)
        return -1;
    int rc = real_fsync ? real_fsync(fd) : (int)syscall(SYS_fsync, fd);
    if (rc == 0)
        track_synced(fd);
    return rc;
}

int fdatasync(int fd) {
    if (inject(fd, OP_SYNC) == MODE_ERROR)
        return -1;
    int rc = real_fdatasync ? real_fdatasync(fd) : (int)syscall(SYS_fdatasync, fd);
    if (rc == 0)
        track_synced(fd);
    return rc;
}

void sync(void) {
    if (real_sync)
        real_sync();
    else
        syscall(SYS_sync);
    track_synced(-1);
}

int syncfs(int fd) {
    int rc = real_syncfs ? real_syncfs(fd) : (int)syscall(SYS_syncfs, fd);
    if (rc == 0)
        track_synced(-1);
    return rc;
}

/* stdio: a stream with pending output on a faulty file loses that output and fails. There
 * is no system call to fall back on, so a call before the constructor resolves lazily. */
static int stdio_fault(FILE *f) {
    if (f == NULL || __fpending(f) == 0)
        return 0;
    struct control *c = control();
    if (c == NULL)
        return 0;
    if (targeted(c, fileno(f), OP_WRITE) == MODE_OFF) {
        track_write(fileno(f), -1); /* the kernel's offset is where the pending bytes go */
        return 0;
    }
    if (inject(fileno(f), OP_WRITE) != MODE_ERROR) {
        track_write(fileno(f), -1); /* slow: delayed, then written */
        return 0;
    }
    int err = errno;
    __fpurge(f);
    errno = err;
    return 1;
}

int fflush(FILE *f) {
    if (!real_fflush)
        real_fflush = dlsym(RTLD_NEXT, "fflush");
    if (stdio_fault(f))
        return EOF;
    return real_fflush(f);
}

int fclose(FILE *f) {
    if (!real_fclose)
        real_fclose = dlsym(RTLD_NEXT, "fclose");
    real_sync = dlsym(RTLD_NEXT, "sync");
    real_syncfs = dlsym(RTLD_NEXT, "syncfs");
    if (stdio_fault(f)) {
        int err = errno;
        real_fclose(f);
        errno = err;
        return EOF;
    }
    return real_fclose(f);
}

/* -- kernel AIO through syscall() -------------------------------------------------------- */

/* The system call itself, for a syscall() that arrives before the constructor resolved
 * libc's (no dlsym there: it may allocate), the shim's own fallbacks above included. */
static long direct_syscall(long n, long a, long b, long c, long d, long e, long f) {
    long ret;
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    ret = x0;
#else
#error "mallory_faults: no direct system call on this architecture"
#endif
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
}

static long forward(long n, long a, long b, long c, long d, long e, long f) {
    return real_syscall ? real_syscall(n, a, b, c, d, e, f) : direct_syscall(n, a, b, c, d, e, f);
}

/* Completions of the iocbs a fault failed instead of submitting them, until an
 * io_getevents on their context takes them (io_destroy drops them). A spin lock: the
 * critical sections are a few stores, and no allocation may happen here. */
#define FAKED_MAX 256
static struct faked {
    aio_context_t ctx;
    struct io_event event;
} faked[FAKED_MAX];
static uint32_t faked_used;
static int faked_lock;

static void faked_acquire(void) {
    while (__atomic_exchange_n(&faked_lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void faked_release(void) { __atomic_store_n(&faked_lock, 0, __ATOMIC_RELEASE); }

/* Queue cb's completion with result `res`; 0 when the queue is full. */
static int faked_push(aio_context_t ctx, struct iocb *cb, long res) {
    faked_acquire();
    if (faked_used == FAKED_MAX) {
        faked_release();
        return 0;
    }
    faked[faked_used++] = (struct faked){ctx, {.data = cb->aio_data, .obj = (uint64_t)(uintptr_t)cb, .res = res}};
    faked_release();
    if (cb->aio_flags & IOCB_FLAG_RESFD) { /* the program waits on its eventfd: wake it */
        uint64_t one = 1;
        int saved = errno;
        forward(SYS_write, (long)cb->aio_resfd, (long)&one, (long)sizeof one, 0, 0, 0);
        errno = saved;
    }
    return 1;
}

/* Move up to `max` queued completions of ctx into events (in queue order), or drop them
 * all when events is NULL; how many. */
static long faked_take(aio_context_t ctx, struct io_event *events, long max) {
    if (__atomic_load_n(&faked_used, __ATOMIC_RELAXED) == 0)
        return 0;
    long taken = 0;
    uint32_t kept = 0;
    faked_acquire();
    for (uint32_t i = 0; i < faked_used; i++) {
        if (faked[i].ctx == ctx && (events == NULL || taken < max)) {
            if (events != NULL)
                events[taken] = faked[i].event;
            taken++;
        } else {
            faked[kept++] = faked[i];
        }
    }
    faked_used = kept;
    faked_release();
    return taken;
}

/* Whether a write on fd with these per-request flags reaches the disk before it completes. */
static int write_syncs(int fd, uint32_t rw_flags) {
    if (rw_flags & (RWF_DSYNC | RWF_SYNC))
        return 1;
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & O_DSYNC);
}

/* The kinds of disk call an iocb is (OP_WRITE and/or OP_SYNC; 0: not a write or sync). */
static uint32_t iocb_ops(const struct iocb *cb) {
    switch (cb->aio_lio_opcode) {
    case IOCB_CMD_PWRITE:
    case IOCB_CMD_PWRITEV:
        return OP_WRITE | (write_syncs((int)cb->aio_fildes, (uint32_t)cb->aio_rw_flags) ? OP_SYNC : 0);
    case IOCB_CMD_FSYNC:
    case IOCB_CMD_FDSYNC:
        return OP_SYNC;
    default:
        return 0;
    }
}

/* A buffered AIO write (neither synced nor direct) leaves unsynced bytes, as write(2) does. */
static void track_iocb(const struct iocb *cb) {
    struct control *c = control();
    if (c == NULL || !__atomic_load_n(&c->track, __ATOMIC_ACQUIRE))
        return;
    if (cb->aio_lio_opcode != IOCB_CMD_PWRITE && cb->aio_lio_opcode != IOCB_CMD_PWRITEV)
        return;
    int fd = (int)cb->aio_fildes;
    int saved = errno;
    int flags = fcntl(fd, F_GETFL);
    int durable = write_syncs(fd, (uint32_t)cb->aio_rw_flags) || (flags >= 0 && (flags & O_DIRECT));
    errno = saved;
    if (!durable)
        track_write(fd, (int64_t)cb->aio_offset);
}

/* Completions the kernel handed out: an AIO fsync that succeeded synced its file. */
static void track_completed(const struct io_event *events, long n) {
    struct control *c = control();
    if (c == NULL || !__atomic_load_n(&c->track, __ATOMIC_ACQUIRE))
        return;
    for (long i = 0; i < n; i++) {
        const struct iocb *cb = (const struct iocb *)(uintptr_t)events[i].obj;
        if (events[i].res == 0 && (cb->aio_lio_opcode == IOCB_CMD_FSYNC || cb->aio_lio_opcode == IOCB_CMD_FDSYNC))
            track_synced((int)cb->aio_fildes);
    }
}

/* io_submit, one iocb at a time: a faulty one completes with -errno without reaching the
 * kernel, a slow one is submitted after the delay. Returns how many were taken, as the
 * kernel does (-1 with errno when the first one could not be). */
static long aio_submit(aio_context_t ctx, long nr, struct iocb **iocbs) {
    struct control *c = control();
    if (c == NULL || __atomic_load_n(&c->mode, __ATOMIC_ACQUIRE) == MODE_OFF) {
        for (long i = 0; i < nr; i++)
            track_iocb(iocbs[i]);
        return forward(SYS_io_submit, (long)ctx, nr, (long)iocbs, 0, 0, 0);
    }
    long done = 0;
    for (; done < nr; done++) {
        struct iocb *cb = iocbs[done];
        int saved = errno;
        uint32_t ops = iocb_ops(cb);
        uint32_t mode = ops ? inject((int)cb->aio_fildes, ops) : MODE_OFF;
        if (mode != MODE_OFF)
            __atomic_add_fetch(&c->aio_injected, 1, __ATOMIC_RELAXED);
        if (mode == MODE_ERROR) {
            int err = errno;
            errno = saved;
            if (faked_push(ctx, cb, -(long)err))
                continue;
            errno = err; /* no room to complete it later: refuse it now */
            return done > 0 ? done : -1;
        }
        track_iocb(cb);
        long rv = forward(SYS_io_submit, (long)ctx, 1, (long)&iocbs[done], 0, 0, 0);
        if (rv != 1)
            return done > 0 ? done : rv;
    }
    return done;
}

/* io_getevents: the faked completions of ctx first; the kernel's after them, without
 * waiting once min_nr are there. */
static long aio_getevents(aio_context_t ctx, long min_nr, long nr, struct io_event *events, struct timespec *timeout) {
    long got = nr > 0 ? faked_take(ctx, events, nr) : 0;
    if (got > 0 && got >= min_nr) {
        if (got < nr) {
            struct timespec now = {0, 0};
            int saved = errno;
            long more = forward(SYS_io_getevents, (long)ctx, 0, nr - got, (long)(events + got), (long)&now, 0);
            errno = saved;
            if (more > 0) {
                track_completed(events + got, more);
                got += more;
            }
        }
        return got;
    }
    long wait = min_nr > got ? min_nr - got : 0;
    long rv = forward(SYS_io_getevents, (long)ctx, wait, nr - got, (long)(events + got), (long)timeout, 0);
    if (rv < 0)
        return got > 0 ? got : rv;
    track_completed(events + got, rv);
    return got + rv;
}

/* syscall(): io_submit, io_getevents and io_destroy get the disk faults above (libraft
 * makes its AIO calls so); everything else goes straight through. Six arguments are read
 * whatever the call takes, as libc's syscall() itself does. */
long syscall(long number, ...) {
    va_list ap;
    va_start(ap, number);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    switch (number) {
    case SYS_io_submit:
        return aio_submit((aio_context_t)a, b, (struct iocb **)c);
    case SYS_io_getevents:
        return aio_getevents((aio_context_t)a, b, c, (struct io_event *)d, (struct timespec *)e);
    case SYS_io_destroy:
        faked_take((aio_context_t)a, NULL, 0);
        return forward(number, a, b, c, d, e, f);
    default:
        return forward(number, a, b, c, d, e, f);
    }
}

/* -- crash backtraces -------------------------------------------------------------------- */

#define CRASH_FRAMES 64
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static char crash_stack[64 * 1024]; /* the main thread's, so a stack overflow is reported too */

/* Only async-signal-safe calls from here on: write(2) and number formatting by hand. */
static void put(const char *text) {
    forward(SYS_write, 2, (long)text, (long)strlen(text), 0, 0, 0);
}

static void put_number(uintptr_t value, unsigned base) {
    char digits[2 + 2 * sizeof value + 1], *at = digits + sizeof digits - 1;
    *at = '\0';
    do {
        *--at = "0123456789abcdef"[value % base];
        value /= base;
    } while (value != 0);
    if (base == 16) {
        *--at = 'x';
        *--at = '0';
    }
    put(at);
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    default: return "SIGABRT";
    }
}

static void on_crash(int sig, siginfo_t *info, void *context) {
    (void)info;
    (void)context;
    int saved = errno;
    void *frames[CRASH_FRAMES];
    int n = backtrace(frames, CRASH_FRAMES);
    put("==mallory== caught ");
    put(signal_name(sig));
    put(": backtrace of pid ");
    put_number((uintptr_t)getpid(), 10);
    put(", innermost first\n");
    for (int i = 1; i < n; i++) { /* frame 0 is this handler */
        Dl_info where;
        put("==mallory== #");
        put_number((uintptr_t)i, 10);
        put(" ");
        put_number((uintptr_t)frames[i], 16);
        if (dladdr(frames[i], &where) && where.dli_fname && where.dli_fname[0]) {
            put(" ");
            put(where.dli_fname);
            put("+");
            put_number((uintptr_t)frames[i] - (uintptr_t)where.dli_fbase, 16);
            if (where.dli_sname) {
                put(" (");
                put(where.dli_sname);
                put("+");
                put_number((uintptr_t)frames[i] - (uintptr_t)where.dli_saddr, 16);
                put(")");
            }
        } else {
            put(" ?+0x0");
        }
        put("\n");
    }
    put("==mallory== end of backtrace\n");
    errno = saved;
    raise(sig); /* the handler was reset on entry: the process dies of the same signal */
}

/* Install the crash handler for the signals still at their default action (an ASan
 * runtime, initialised before any preload, keeps its own). backtrace() loads its unwinder
 * on first use, which allocates: done here, not in the handler. */
static void catch_crashes(void) {
    void *warm[1];
    backtrace(warm, 1);
    stack_t stack = {.ss_sp = crash_stack, .ss_size = sizeof crash_stack, .ss_flags = 0};
    sigaltstack(&stack, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_crash;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++) {
        struct sigaction old;
        if (sigaction(crash_signals[i], NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
            sigaction(crash_signals[i], &action, NULL);
    }
}
