/* Disk faults for one node's SUT, switched at run time: an LD_PRELOAD shim.
 *
 * The shim maps the node's control file (path in $MALLORY_DISK_CONTROL, written by
 * nemesis/faults/controls.py) and consults it on every write-family and sync call. While
 * the control says "off" a call costs one memory load. While a fault is on, a call on a
 * REGULAR file whose path starts with the control's prefix (the node's data directory;
 * empty = any regular file) either fails with the control's errno (EIO, ENOSPC, ...) or is
 * delayed by delay_us before it runs. Sockets, pipes and terminals are never touched: those
 * are the network's and the logs' business. Each injected error or delay is counted in the
 * control file, so the nemesis can read back that the SUT really received it.
 *
 * Reach: programs that call libc's write/pwrite/writev/pwritev/fsync/fdatasync through the
 * dynamic linker (C/C++ SUTs such as Redis, libraft servers). Statically linked programs
 * (Go: etcd) and calls libc makes internally (stdio's buffered fwrite/fflush) do not pass
 * through it; fsync after stdio does.
 *
 * Control file layout (little endian, 4096 bytes):
 *   0  u32 magic "MDSK"      4  u32 version (1)
 *   8  u32 mode (0 off, 1 error, 2 slow)
 *  12  i32 err (errno for mode 1)
 *  16  u32 ops (bit 0: write family, bit 1: fsync/fdatasync)
 *  20  u32 delay_us (mode 2)
 *  24  u64 injected (incremented by the shim)
 *  32  char prefix[256] (NUL-terminated)
 * The writer sets mode to 0, changes the other fields, then sets mode last.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CTL_MAGIC 0x4b53444du /* "MDSK" */
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
    uint64_t injected;
    char prefix[256];
};

static struct control *ctl;

__attribute__((constructor)) static void map_control(void) {
    const char *path = getenv("MALLORY_DISK_CONTROL");
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
    ctl = c;
}

static void *real(const char *name) {
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL)
        abort(); /* libc without the symbol: nothing sane to fall back on */
    return fn;
}

/* The fault mode applying to a call of kind `op` on fd (MODE_OFF if none). */
static uint32_t targeted(int fd, uint32_t op) {
    struct control *c = ctl;
    if (c == NULL)
        return MODE_OFF;
    uint32_t mode = __atomic_load_n(&c->mode, __ATOMIC_ACQUIRE);
    if (mode == MODE_OFF || (c->ops & op) == 0)
        return MODE_OFF;
    int saved = errno;
    struct stat st;
    uint32_t result = MODE_OFF;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        result = mode;
        if (c->prefix[0] != '\0') {
            char link[64], path[4096];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, path, sizeof path - 1);
            size_t plen = strnlen(c->prefix, sizeof c->prefix);
            if (n < 0 || (size_t)n < plen || memcmp(path, c->prefix, plen) != 0)
                result = MODE_OFF;
        }
    }
    errno = saved;
    return result;
}

/* Apply the fault: 1 when the call must fail (errno set), 0 to go on with the real call. */
static int inject(int fd, uint32_t op) {
    uint32_t mode = targeted(fd, op);
    if (mode == MODE_OFF)
        return 0;
    __atomic_add_fetch(&ctl->injected, 1, __ATOMIC_RELAXED);
    if (mode == MODE_ERROR) {
        errno = ctl->err ? ctl->err : EIO;
        return 1;
    }
    uint32_t us = ctl->delay_us;
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*fn)(int, const void *, size_t);
    if (!fn)
        fn = real("write");
    if (inject(fd, OP_WRITE))
        return -1;
    return fn(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*fn)(int, const void *, size_t, off_t);
    if (!fn)
        fn = real("pwrite");
    if (inject(fd, OP_WRITE))
        return -1;
    return fn(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    static ssize_t (*fn)(int, const void *, size_t, off64_t);
    if (!fn)
        fn = real("pwrite64");
    if (inject(fd, OP_WRITE))
        return -1;
    return fn(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    static ssize_t (*fn)(int, const struct iovec *, int);
    if (!fn)
        fn = real("writev");
    if (inject(fd, OP_WRITE))
        return -1;
    return fn(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    static ssize_t (*fn)(int, const struct iovec *, int, off_t);
    if (!fn)
        fn = real("pwritev");
    if (inject(fd, OP_WRITE))
        return -1;
    return fn(fd, iov, iovcnt, offset);
}

int fsync(int fd) {
    static int (*fn)(int);
    if (!fn)
        fn = real("fsync");
    if (inject(fd, OP_SYNC))
        return -1;
    return fn(fd);
}

int fdatasync(int fd) {
    static int (*fn)(int);
    if (!fn)
        fn = real("fdatasync");
    if (inject(fd, OP_SYNC))
        return -1;
    return fn(fd);
}
