/*
 * raft-kv: a replicated key-value store on Canonical Raft (Debian libraft-dev 0.15.0),
 * Mallory's SUT on a real consensus library (see README.md next to this file).
 *
 * One process per node, one libuv loop. The state machine maps string keys to string
 * values (get / put / cas / append); every client operation, reads included, is a log
 * entry answered when it is applied, so the service is linearizable. Snapshots serialize
 * the whole map; a restarted node restores from its latest one and replays the log after.
 * Every applied command extends a hash chain (FNV-1a 64 over the previous value, the
 * entry's index and its bytes), kept for the last CHAIN_KEPT commands and carried in
 * snapshots, so two replicas can be compared at a common index: equal chains, equal
 * commands applied up to it.
 *
 * Client protocol on the client port, one text line each way (suts/example's protocol, so
 * mallory/harness/line_client.py works):
 *   GET k | PUT k v | CAS k old new | APPEND k v
 *     -> OK [value|nil] | FAIL mismatch | ERR not-leader <leader host or -> |
 *        UNKNOWN <why> (the outcome is unknown: the entry may still commit) | ERR <why>
 *   TXN mop ...  with mop  r:k | w:k:v | a:k:v  (read, write, append), one log entry
 *     applied atomically -> OK <one result per mop: the value read (nil if none), _ else>
 * Values of APPEND / a:k:v are appended with commas: "1,2,3".
 * Admin commands on the same port (membership and leadership need the leader):
 *   LEADER                   -> OK <leader raft address or ->
 *   STATUS                   -> OK state=<s> term=<t> leader=<a> applied=<i> snapshot=<i> ...
 *   MEMBERS                  -> OK <address>/<role> ...
 *   DIGEST                   -> OK applied=<index of the last command applied> chain=<hex>
 *   DIGEST <index>           -> OK index=<index> chain=<hex> | ERR not-kept (not a command
 *                               index among the last CHAIN_KEPT applied)
 *   ADD <raft address> [<id>] -> OK once the server is in the configuration (as a spare)
 *   ASSIGN <address> voter|standby|spare -> OK once the role change is committed
 *   REMOVE <address>         -> OK once the removal is committed
 *   TRANSFER [<address>]     -> OK <new leader or -> when the transfer ended (no address:
 *                               the library picks a voter)
 * A server's id is its --id, by default raft_digest(its raft address, 0): the initial
 * voters derive each other's ids from their addresses. A server added back after it was
 * removed gets a fresh id (--id, and ADD's <id>), as an operator would give it, so late
 * messages of its earlier incarnation are not taken for its own. ASSIGN, REMOVE and
 * TRANSFER name a server by address; its id is the one the configuration holds.
 *
 * Library contracts followed (raft.h, raft/uv.h): entry payloads are raft_malloc'ed and
 * padded to a multiple of 8 bytes, and belong to the library once raft_apply accepted
 * them; the FSM is version 2, so snapshot buffers stay ours and are freed in
 * snapshot_finalize; restore takes ownership of the snapshot buffer (raft_free on
 * success); bootstrap only on a pristine data directory; SIGTERM closes raft with
 * raft_close, then raft_uv_close / raft_uv_tcp_close once its callback fired, and closes
 * only its own handles (the library closes its own: closing them behind its back corrupted
 * its memory, a SIGSEGV on about one SIGTERM in three under load).
 * LIBRAFT_TRACE=1 in the environment makes the library trace to stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#define MAX_NODES 16
#define ADDR_LEN 64
#define LINE_MAX_LEN 65536
#define BUCKETS 4096
#define CHAIN_KEPT 1024

/* -- the state machine: a hash map of strings ------------------------------------------ */

struct kv {
    char *key, *val;
    struct kv *next;
};

static struct {
    struct kv *buckets[BUCKETS];
    unsigned long count;
    /* The result of the latest apply. libraft hands apply's result pointer to the request's
     * callback right after apply returns (and drops it on followers, which have no
     * request), so one buffer that the next apply overwrites is enough, and nothing leaks. */
    char *result;
    size_t result_cap;
} F;

static unsigned long hash(const char *s)
{
    unsigned long h = 1469598103934665603UL;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211UL;
    return h;
}

static struct kv *kv_find(const char *key)
{
    struct kv *e = F.buckets[hash(key) % BUCKETS];
    while (e != NULL && strcmp(e->key, key) != 0)
        e = e->next;
    return e;
}

static void kv_set(const char *key, const char *val)
{
    struct kv *e = kv_find(key);
    if (e == NULL) {
        unsigned long b = hash(key) % BUCKETS;
        e = calloc(1, sizeof *e);
        e->key = strdup(key);
        e->next = F.buckets[b];
        F.buckets[b] = e;
        F.count++;
    } else {
        free(e->val);
    }
    e->val = strdup(val);
}

static void kv_clear(void)
{
    for (int b = 0; b < BUCKETS; b++) {
        struct kv *e = F.buckets[b];
        while (e != NULL) {
            struct kv *next = e->next;
            free(e->key);
            free(e->val);
            free(e);
            e = next;
        }
        F.buckets[b] = NULL;
    }
    F.count = 0;
}

static void set_result(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(F.result, F.result_cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= F.result_cap) {
        F.result_cap = (size_t)n + 1;
        F.result = realloc(F.result, F.result_cap);
        va_start(ap, fmt);
        vsnprintf(F.result, F.result_cap, fmt, ap);
        va_end(ap);
    }
}

/* -- the applied commands' hash chain --------------------------------------------------- */

static struct {
    raft_index index; /* the last command the chain covers (0: none yet) */
    uint64_t value;
    struct {
        raft_index index;
        uint64_t value;
    } kept[CHAIN_KEPT]; /* the chain after each of the last CHAIN_KEPT commands, a ring */
    unsigned long count;
} C;

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void chain_keep(raft_index index, uint64_t value)
{
    C.index = index;
    C.value = value;
    C.kept[C.count % CHAIN_KEPT].index = index;
    C.kept[C.count % CHAIN_KEPT].value = value;
    C.count++;
}

static void chain_extend(raft_index index, const struct raft_buffer *buf)
{
    uint64_t h = fnv1a(14695981039346656037ULL, &C.value, sizeof C.value);
    h = fnv1a(h, &index, sizeof index);
    chain_keep(index, fnv1a(h, buf->base, buf->len));
}

/* The chain restored from a snapshot: the ring starts again from there. */
static void chain_restart(raft_index index, uint64_t value)
{
    C.count = 0;
    chain_keep(index, value);
}

/* The chain's value after command `index`; 0 when it is not among those kept. */
static int chain_at(raft_index index, uint64_t *value)
{
    unsigned long n = C.count < CHAIN_KEPT ? C.count : CHAIN_KEPT;
    for (unsigned long i = 0; i < n; i++) {
        if (C.kept[i].index == index && index != 0) {
            *value = C.kept[i].value;
            return 1;
        }
    }
    return 0;
}

/* -- the node -------------------------------------------------------------------------- */

static struct {
    uv_loop_t loop;
    struct raft_uv_transport transport;
    struct raft_io io;
    struct raft_fsm fsm;
    struct raft raft;
    uv_tcp_t listener;
    uv_signal_t sigterm, sigint;
    uv_check_t watcher;
    struct client *clients; /* connected clients, until their handle's close callback */
    char address[ADDR_LEN]; /* our raft address, ip:port */
    raft_id id;             /* our raft id: --id, else derived from the address */
    char listen_ip[40]; /* an IPv4 address */
    int client_port;
    char data_dir[512];
    char cluster[MAX_NODES][ADDR_LEN];
    int ncluster;
    int join;
    unsigned election_ms, heartbeat_ms, snapshot_threshold, snapshot_trailing, connect_retry_ms;
    int pre_vote;
    int closing;
    /* what the watcher saw last */
    int last_state;
    raft_id last_leader;
    raft_index last_snapshot, last_conf_index;
} S;

static const char *state_name(int state)
{
    switch (state) {
    case RAFT_FOLLOWER: return "follower";
    case RAFT_CANDIDATE: return "candidate";
    case RAFT_LEADER: return "leader";
    default: return "unavailable";
    }
}

static const char *role_name(int role)
{
    switch (role) {
    case RAFT_VOTER: return "voter";
    case RAFT_STANDBY: return "standby";
    case RAFT_SPARE: return "spare";
    default: return "unknown";
    }
}

static void say(const char *fmt, ...)
{
    va_list ap;
    printf("[raft-kv %s term %llu %s] ", S.address, S.raft.current_term, state_name(raft_state(&S.raft)));
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* The id an initial voter has: derived from its address. */
static raft_id id_of(const char *address)
{
    raft_id id = raft_digest(address, 0);
    return id == 0 ? 1 : id;
}

/* The id of the server with this address in the configuration (derived when none has it,
 * so the library answers for an unknown server). */
static raft_id id_in_configuration(const char *address)
{
    for (unsigned i = 0; i < S.raft.configuration.n; i++)
        if (strcmp(S.raft.configuration.servers[i].address, address) == 0)
            return S.raft.configuration.servers[i].id;
    return id_of(address);
}

/* A positive decimal raft id, or 0. */
static raft_id parse_id(const char *text)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    return *text == '\0' || *end != '\0' || errno != 0 || text[0] == '-' ? 0 : (raft_id)v;
}

static void kv_append(const char *key, const char *val)
{
    struct kv *e = kv_find(key);
    if (e == NULL) {
        kv_set(key, val);
        return;
    }
    size_t len = strlen(e->val) + strlen(val) + 2;
    char *joined = malloc(len);
    snprintf(joined, len, "%s,%s", e->val, val);
    free(e->val);
    e->val = joined;
}

/* "r:k w:k:v a:k:v ...": every mop in order; the result lists what each read saw. The
 * client checked the syntax; a malformed mop here gives "?" and changes nothing. */
// INSTRUMENT_FUNC apply-txn
static void apply_txn(const char *mops)
{
    size_t cap = 256, len = 2;
    char *out = malloc(cap), *copy = strdup(mops), *save = NULL;
    memcpy(out, "OK", 3);
    for (char *mop = strtok_r(copy, " ", &save); mop; mop = strtok_r(NULL, " ", &save)) {
        char *key = mop + 2, *val = strchr(key, ':');
        const char *said = "_";
        if (val != NULL)
            *val++ = '\0';
        if (mop[0] == 'r' && mop[1] == ':' && val == NULL) {
            struct kv *e = kv_find(key);
            said = e ? e->val : "nil";
        } else if (mop[0] == 'w' && mop[1] == ':' && val != NULL) {
            kv_set(key, val);
        } else if (mop[0] == 'a' && mop[1] == ':' && val != NULL) {
            kv_append(key, val);
        } else {
            said = "?";
        }
        size_t need = len + strlen(said) + 2;
        if (need > cap) {
            cap = need * 2;
            out = realloc(out, cap);
        }
        len += (size_t)sprintf(out + len, " %s", said);
    }
    set_result("%s", out);
    free(out);
    free(copy);
}

/* -- FSM callbacks ---------------------------------------------------------------------- */

/* A command entry: "G k" | "P k v" | "C k old new" | "A k v", NUL-padded to a multiple of
 * 8 bytes (at least one NUL, so it is a C string). */

// INSTRUMENT_FUNC apply
static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    (void)fsm;
    char op[8] = "", key[LINE_MAX_LEN], a[LINE_MAX_LEN], b[LINE_MAX_LEN];
    const char *text = buf->base;
    *result = NULL;
    chain_extend(raft_last_applied(&S.raft) + 1, buf); /* the library sets last_applied after */
    if (buf->len == 0 || text[buf->len - 1] != '\0') {
        set_result("ERR malformed-entry");
        *result = F.result;
        return 0; /* never fail apply: the library would not advance past the entry */
    }
    if (strncmp(text, "T ", 2) == 0) {
        apply_txn(text + 2);
        *result = F.result;
        return 0;
    }
    int n = sscanf(text, "%7s %65535s %65535s %65535s", op, key, a, b);
    struct kv *e = n >= 2 ? kv_find(key) : NULL;
    if (n == 2 && strcmp(op, "G") == 0) {
        set_result("OK %s", e ? e->val : "nil");
    } else if (n == 3 && strcmp(op, "P") == 0) {
        kv_set(key, a);
        set_result("OK");
    } else if (n == 4 && strcmp(op, "C") == 0) {
        if (e != NULL && strcmp(e->val, a) == 0) {
            kv_set(key, b);
            set_result("OK");
        } else {
            // INSTRUMENT_BLOCK cas-mismatch
            set_result("FAIL mismatch");
        }
    } else if (n == 3 && strcmp(op, "A") == 0) {
        kv_append(key, a);
        set_result("OK");
    } else {
        set_result("ERR malformed-entry");
    }
    *result = F.result;
    return 0;
}

/* Snapshot: "raft-kv 2 <count> <chain index> <chain hex>\n" then "key value\n" per pair,
 * NUL-padded to 8 bytes. The chain is the one after the snapshot's last applied entry. */

// INSTRUMENT_FUNC snapshot
static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    (void)fsm;
    size_t len = 96; /* the header line, at most 70 bytes */
    for (int i = 0; i < BUCKETS; i++)
        for (struct kv *e = F.buckets[i]; e != NULL; e = e->next)
            len += strlen(e->key) + strlen(e->val) + 2;
    len = (len + 8) & ~(size_t)7;
    char *data = raft_calloc(1, len);
    struct raft_buffer *out = raft_malloc(sizeof *out);
    if (data == NULL || out == NULL) {
        raft_free(data);
        raft_free(out);
        return RAFT_NOMEM;
    }
    size_t at = (size_t)snprintf(data, len, "raft-kv 2 %lu %llu %016llx\n", F.count, C.index,
                                 (unsigned long long)C.value);
    for (int i = 0; i < BUCKETS; i++)
        for (struct kv *e = F.buckets[i]; e != NULL; e = e->next)
            at += (size_t)snprintf(data + at, len - at, "%s %s\n", e->key, e->val);
    out->base = data;
    out->len = len;
    *bufs = out;
    *n_bufs = 1;
    say("snapshot taken: %lu keys, %zu bytes (applied %llu)", F.count, len, raft_last_applied(&S.raft));
    return 0;
}

/* Version 2 FSM: the library no longer owns what fsm_snapshot returned; free it here. */
static int fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    (void)fsm;
    if (*bufs != NULL) {
        for (unsigned i = 0; i < *n_bufs; i++)
            raft_free((*bufs)[i].base);
        raft_free(*bufs);
    }
    *bufs = NULL;
    *n_bufs = 0;
    return 0;
}

// INSTRUMENT_FUNC restore
static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    (void)fsm;
    const char *text = buf->base;
    unsigned long count;
    raft_index chain_index;
    unsigned long long chain_value;
    int used = 0;
    if (buf->len == 0 || text[buf->len - 1] != '\0' ||
        sscanf(text, "raft-kv 2 %lu %llu %llx\n%n", &count, &chain_index, &chain_value, &used) != 3 || used == 0) {
        say("restore refused: not a raft-kv snapshot (%zu bytes)", buf->len);
        return RAFT_MALFORMED; /* on failure the buffer stays the library's */
    }
    kv_clear();
    const char *p = text + used;
    for (unsigned long i = 0; i < count; i++) {
        const char *space = strchr(p, ' ');
        const char *nl = space ? strchr(space, '\n') : NULL;
        if (nl == NULL)
            break;
        char *key = strndup(p, (size_t)(space - p));
        char *val = strndup(space + 1, (size_t)(nl - space - 1));
        kv_set(key, val);
        free(key);
        free(val);
        p = nl + 1;
    }
    chain_restart(chain_index, chain_value);
    say("restored snapshot: %lu keys (of %lu), chain at %llu", F.count, count, chain_index);
    raft_free(buf->base); /* success: the buffer is ours now */
    return 0;
}

/* -- watching the library's state (0.15 has no callbacks for these) ------------------- */

// INSTRUMENT_FUNC state-change
static void on_state_change(int from, int to)
{
    if (to == RAFT_LEADER) {
        // INSTRUMENT_BLOCK became-leader
        say("became leader (was %s)", state_name(from));
    } else if (to == RAFT_CANDIDATE) {
        // INSTRUMENT_BLOCK became-candidate
        say("became candidate (was %s)", state_name(from));
    } else if (to == RAFT_FOLLOWER) {
        // INSTRUMENT_BLOCK became-follower
        say("became follower (was %s)", state_name(from));
    } else {
        say("state %s (was %s)", state_name(to), state_name(from));
    }
}

// INSTRUMENT_FUNC leader-change
static void on_leader_change(raft_id id, const char *address)
{
    if (id == 0) {
        // INSTRUMENT_BLOCK leader-lost
        say("no known leader");
    } else {
        say("following leader %s", address ? address : "?");
    }
}

// INSTRUMENT_FUNC membership-change
static void on_membership_change(void)
{
    char text[MAX_NODES * (ADDR_LEN + 10)] = "";
    size_t at = 0;
    for (unsigned i = 0; i < S.raft.configuration.n && at < sizeof text; i++) {
        struct raft_server *s = &S.raft.configuration.servers[i];
        at += (size_t)snprintf(text + at, sizeof text - at, " %s/%s", s->address, role_name(s->role));
    }
    say("configuration at %llu:%s", S.raft.configuration_index, text);
}

// INSTRUMENT_FUNC snapshot-index-advanced
static void on_snapshot_index(raft_index index)
{
    say("snapshot at index %llu (log starts after it)", index);
}

static void watch(uv_check_t *handle)
{
    (void)handle;
    if (S.closing)
        return;
    int state = raft_state(&S.raft);
    if (state != S.last_state) {
        on_state_change(S.last_state, state);
        S.last_state = state;
    }
    if (state == RAFT_UNAVAILABLE) {
        /* libraft gives up on a server after an I/O error it cannot recover from (a failed
         * fsync, say); it never becomes available again in this process. Fail-stop, so the
         * harness (a supervisor, in production) sees it down and restarts it. */
        // INSTRUMENT_BLOCK unavailable-exit
        say("raft unavailable (%s): exiting, restart to recover", raft_errmsg(&S.raft));
        exit(3);
    }
    raft_id leader;
    const char *address;
    raft_leader(&S.raft, &leader, &address);
    if (leader != S.last_leader && state != RAFT_LEADER) {
        on_leader_change(leader, address);
    }
    S.last_leader = leader;
    raft_index conf = S.raft.configuration_uncommitted_index ? S.raft.configuration_uncommitted_index
                                                             : S.raft.configuration_index;
    if (conf != S.last_conf_index) {
        S.last_conf_index = conf;
        on_membership_change();
    }
    if (S.raft.log.snapshot.last_index != S.last_snapshot) {
        S.last_snapshot = S.raft.log.snapshot.last_index;
        on_snapshot_index(S.last_snapshot);
    }
}

/* -- clients ---------------------------------------------------------------------------- */

struct client {
    uv_tcp_t tcp;
    size_t len;
    int busy;          /* a request in flight: reading paused so replies keep order */
    int closing;       /* uv_close called */
    int closed;        /* close callback ran */
    int pending;       /* library requests not yet called back */
    struct client *prev, *next; /* in S.clients */
    char buf[LINE_MAX_LEN];
};

struct op {
    union {
        struct raft_apply apply;
        struct raft_change change;
        struct raft_transfer transfer;
    } req;
    struct client *client;
    char what[16];
};

struct reply {
    uv_write_t req;
    char text[];
};

static void client_drain(struct client *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void client_maybe_free(struct client *c)
{
    if (c->closed && c->pending == 0)
        free(c);
}

static void on_client_closed(uv_handle_t *h)
{
    struct client *c = h->data;
    if (c->prev)
        c->prev->next = c->next;
    else
        S.clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->closed = 1;
    client_maybe_free(c);
}

static void client_close(struct client *c)
{
    if (!c->closing) {
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, on_client_closed);
    }
}

static void on_written(uv_write_t *req, int status)
{
    (void)status;
    free(req);
}

static void send_line(struct client *c, const char *fmt, ...)
{
    char text[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof text - 2)
        n = (int)(sizeof text - 2);
    text[n++] = '\n';
    struct reply *r = malloc(sizeof *r + (size_t)n);
    memcpy(r->text, text, (size_t)n);
    uv_buf_t b = uv_buf_init(r->text, (unsigned)n);
    if (uv_write(&r->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(r);
        client_close(c);
    }
}

/* A request the library answered: reply (unless the client went away), resume reading. */
static void finish(struct op *op, const char *fmt, ...)
{
    struct client *c = op->client;
    char text[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    free(op);
    c->pending--;
    c->busy = 0;
    if (c->closing) {
        client_maybe_free(c);
        return;
    }
    send_line(c, "%s", text);
    client_drain(c);
}

static void not_leader(struct client *c)
{
    raft_id id;
    const char *address;
    raft_leader(&S.raft, &id, &address);
    char host[ADDR_LEN] = "-";
    if (id != 0 && id != S.raft.id && address != NULL) {
        snprintf(host, sizeof host, "%s", address);
        char *colon = strrchr(host, ':');
        if (colon)
            *colon = '\0';
    }
    // INSTRUMENT_BLOCK not-leader-reply
    send_line(c, "ERR not-leader %s", host);
}

static const char *status_word(int status)
{
    return status == RAFT_LEADERSHIPLOST ? "leadership-lost" : raft_strerror(status);
}

static void on_applied(struct raft_apply *req, int status, void *result)
{
    struct op *op = req->data;
    if (status == 0) {
        finish(op, "%s", result ? (const char *)result : "ERR no-result");
    } else {
        // INSTRUMENT_BLOCK apply-failed
        say("%s not applied: %s", op->what, raft_strerror(status));
        finish(op, "UNKNOWN %s", status_word(status));
    }
}

static void on_changed(struct raft_change *req, int status)
{
    struct op *op = req->data;
    if (status == 0) {
        finish(op, "OK");
    } else {
        say("%s failed: %s", op->what, raft_strerror(status));
        finish(op, "UNKNOWN %s", status_word(status));
    }
}

static void on_transferred(struct raft_transfer *req)
{
    struct op *op = req->data;
    raft_id id;
    const char *address;
    raft_leader(&S.raft, &id, &address);
    finish(op, "OK %s", id != 0 && address ? address : "-");
}

static struct op *new_op(struct client *c, const char *what)
{
    struct op *op = calloc(1, sizeof *op);
    op->client = c;
    snprintf(op->what, sizeof op->what, "%s", what);
    return op;
}

/* Hand an op to the library: on success the client waits for its callback. */
static void submitted(struct client *c, struct op *op, int rv)
{
    if (rv == 0) {
        c->pending++;
        c->busy = 1;
        return;
    }
    free(op);
    if (rv == RAFT_NOTLEADER || rv == RAFT_LEADERSHIPLOST)
        not_leader(c);
    else
        send_line(c, "ERR %s", raft_strerror(rv));
}

// INSTRUMENT_FUNC client-command
static void submit_command(struct client *c, const char *what, const char *command)
{
    if (raft_state(&S.raft) != RAFT_LEADER) {
        not_leader(c);
        return;
    }
    size_t len = (strlen(command) + 8) & ~(size_t)7; /* room for a NUL, multiple of 8 */
    struct raft_buffer buf = {.base = raft_calloc(1, len), .len = len};
    if (buf.base == NULL) {
        send_line(c, "ERR out-of-memory");
        return;
    }
    memcpy(buf.base, command, strlen(command));
    struct op *op = new_op(c, what);
    op->req.apply.data = op;
    int rv = raft_apply(&S.raft, &op->req.apply, &buf, 1, on_applied);
    if (rv != 0)
        raft_free(buf.base); /* not accepted: still ours */
    submitted(c, op, rv);
}

static int parse_role(const char *word)
{
    if (strcmp(word, "voter") == 0)
        return RAFT_VOTER;
    if (strcmp(word, "standby") == 0)
        return RAFT_STANDBY;
    if (strcmp(word, "spare") == 0)
        return RAFT_SPARE;
    return -1;
}

static void members(struct client *c)
{
    char text[MAX_NODES * (ADDR_LEN + 10)] = "";
    size_t at = 0;
    for (unsigned i = 0; i < S.raft.configuration.n && at < sizeof text; i++) {
        struct raft_server *s = &S.raft.configuration.servers[i];
        at += (size_t)snprintf(text + at, sizeof text - at, " %s/%s", s->address, role_name(s->role));
    }
    send_line(c, "OK%s", text);
}

// INSTRUMENT_FUNC admin-command
static void admin(struct client *c, const char *cmd, const char *arg, const char *arg2, int n)
{
    struct op *op;
    if (strcmp(cmd, "ADD") == 0 && (n == 2 || (n == 3 && parse_id(arg2) != 0))) {
        raft_id id = n == 3 ? parse_id(arg2) : id_of(arg);
        say("admin: add %s as id %llu", arg, id);
        op = new_op(c, "add");
        op->req.change.data = op;
        submitted(c, op, raft_add(&S.raft, &op->req.change, id, arg, on_changed));
    } else if (strcmp(cmd, "ASSIGN") == 0 && n == 3 && parse_role(arg2) >= 0) {
        say("admin: assign %s %s", arg, arg2);
        op = new_op(c, "assign");
        op->req.change.data = op;
        submitted(c, op, raft_assign(&S.raft, &op->req.change, id_in_configuration(arg), parse_role(arg2), on_changed));
    } else if (strcmp(cmd, "REMOVE") == 0 && n == 2) {
        say("admin: remove %s", arg);
        op = new_op(c, "remove");
        op->req.change.data = op;
        submitted(c, op, raft_remove(&S.raft, &op->req.change, id_in_configuration(arg), on_changed));
    } else if (strcmp(cmd, "TRANSFER") == 0 && n <= 2) {
        say("admin: transfer leadership to %s", n == 2 ? arg : "any voter");
        op = new_op(c, "transfer");
        op->req.transfer.data = op;
        submitted(c, op, raft_transfer(&S.raft, &op->req.transfer, n == 2 ? id_in_configuration(arg) : 0, on_transferred));
    } else {
        send_line(c, "ERR bad-request");
    }
}

/* "r:k" | "w:k:v" | "a:k:v", k and v without ':' (and, being tokens, without spaces). */
static int valid_mop(const char *mop)
{
    if ((mop[0] != 'r' && mop[0] != 'w' && mop[0] != 'a') || mop[1] != ':' || mop[2] == '\0' || mop[2] == ':')
        return 0;
    const char *colon = strchr(mop + 2, ':');
    if (mop[0] == 'r')
        return colon == NULL;
    return colon != NULL && colon[1] != '\0' && strchr(colon + 1, ':') == NULL;
}

static void submit_txn(struct client *c, char *mops)
{
    static char command[LINE_MAX_LEN + 8];
    int count = 0, at = snprintf(command, sizeof command, "T");
    char *save = NULL;
    for (char *mop = strtok_r(mops, " \t", &save); mop; mop = strtok_r(NULL, " \t", &save), count++) {
        if (!valid_mop(mop)) {
            send_line(c, "ERR bad-request");
            return;
        }
        at += snprintf(command + at, sizeof command - (size_t)at, " %s", mop);
    }
    if (count == 0) {
        send_line(c, "ERR bad-request");
        return;
    }
    submit_command(c, "txn", command);
}

static void handle_line(struct client *c, char *line)
{
    if (S.closing) {
        send_line(c, "ERR shutting-down");
        return;
    }
    if (strncmp(line, "TXN ", 4) == 0) {
        submit_txn(c, line + 4);
        return;
    }
    char cmd[16] = "", a[LINE_MAX_LEN] = "", b[LINE_MAX_LEN] = "", d[LINE_MAX_LEN] = "", extra[8] = "";
    int n = sscanf(line, "%15s %65535s %65535s %65535s %7s", cmd, a, b, d, extra);
    char command[3 * LINE_MAX_LEN + 8];
    if (n <= 0)
        return;
    // INSTRUMENT_BLOCK client-request
    if (strcmp(cmd, "GET") == 0 && n == 2) {
        snprintf(command, sizeof command, "G %s", a);
        submit_command(c, "get", command);
    } else if (strcmp(cmd, "PUT") == 0 && n == 3) {
        snprintf(command, sizeof command, "P %s %s", a, b);
        submit_command(c, "put", command);
    } else if (strcmp(cmd, "CAS") == 0 && n == 4) {
        snprintf(command, sizeof command, "C %s %s %s", a, b, d);
        submit_command(c, "cas", command);
    } else if (strcmp(cmd, "APPEND") == 0 && n == 3) {
        snprintf(command, sizeof command, "A %s %s", a, b);
        submit_command(c, "append", command);
    } else if (strcmp(cmd, "LEADER") == 0 && n == 1) {
        raft_id id;
        const char *address;
        raft_leader(&S.raft, &id, &address);
        send_line(c, "OK %s", id != 0 && address ? address : "-");
    } else if (strcmp(cmd, "STATUS") == 0 && n == 1) {
        raft_id id;
        const char *address;
        raft_leader(&S.raft, &id, &address);
        send_line(c, "OK state=%s term=%llu leader=%s commit=%llu applied=%llu last=%llu snapshot=%llu keys=%lu",
                  state_name(raft_state(&S.raft)), S.raft.current_term, id != 0 && address ? address : "-",
                  S.raft.commit_index, raft_last_applied(&S.raft), raft_last_index(&S.raft),
                  S.raft.log.snapshot.last_index, F.count);
    } else if (strcmp(cmd, "MEMBERS") == 0 && n == 1) {
        members(c);
    } else if (strcmp(cmd, "DIGEST") == 0 && n == 1) {
        send_line(c, "OK applied=%llu chain=%016llx", C.index, (unsigned long long)C.value);
    } else if (strcmp(cmd, "DIGEST") == 0 && n == 2) {
        raft_index index = (raft_index)parse_id(a);
        uint64_t value;
        if (chain_at(index, &value))
            send_line(c, "OK index=%llu chain=%016llx", index, (unsigned long long)value);
        else
            send_line(c, "ERR not-kept");
    } else {
        admin(c, cmd, a, b, n);
    }
}

/* Handle buffered lines until one starts a library request (replies stay in order). */
static void client_drain(struct client *c)
{
    while (!c->busy && !c->closing) {
        char *nl = memchr(c->buf, '\n', c->len);
        if (nl == NULL)
            break;
        *nl = '\0';
        if (nl > c->buf && nl[-1] == '\r')
            nl[-1] = '\0';
        handle_line(c, c->buf);
        size_t used = (size_t)(nl - c->buf) + 1;
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
    }
    if (c->closing)
        return;
    if (c->busy)
        uv_read_stop((uv_stream_t *)&c->tcp);
    else if (c->len == sizeof c->buf)
        client_close(c); /* a line longer than we take */
    else
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read); /* UV_EALREADY: reading */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct client *c = h->data;
    *buf = uv_buf_init(c->buf + c->len, (unsigned)(sizeof c->buf - c->len));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct client *c = stream->data;
    if (nread < 0) {
        client_close(c);
        return;
    }
    c->len += (size_t)nread;
    client_drain(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0 || S.closing)
        return;
    struct client *c = calloc(1, sizeof *c);
    uv_tcp_init(&S.loop, &c->tcp);
    c->tcp.data = c;
    c->next = S.clients;
    if (S.clients)
        S.clients->prev = c;
    S.clients = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        client_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* -- shutdown --------------------------------------------------------------------------- */

static void close_own(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void on_raft_closed(struct raft *r)
{
    (void)r;
    raft_uv_close(&S.io);
    raft_uv_tcp_close(&S.transport);
    close_own((uv_handle_t *)&S.listener);
    close_own((uv_handle_t *)&S.watcher);
    close_own((uv_handle_t *)&S.sigterm);
    close_own((uv_handle_t *)&S.sigint);
    for (struct client *c = S.clients; c != NULL; c = c->next)
        client_close(c);
}

// INSTRUMENT_FUNC shutdown
static void on_signal(uv_signal_t *h, int signum)
{
    (void)h;
    if (S.closing)
        return;
    say("signal %d: closing raft", signum);
    S.closing = 1;
    raft_close(&S.raft, on_raft_closed);
}

/* -- start-up --------------------------------------------------------------------------- */

static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "raft-kv: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        die("cannot open data dir %s: %s", path, strerror(errno));
    struct dirent *e;
    int empty = 1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    closedir(d);
    return empty;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: raft-kv --listen IP --client-port P --raft-port Q --peers IP:Q,... --data DIR\n"
            "               [--join] [--id N] [--election-ms 1000] [--heartbeat-ms 100]\n"
            "               [--snapshot-threshold 1024] [--snapshot-trailing 128]\n"
            "               [--connect-retry-ms 1000] [--pre-vote]\n"
            "--peers: the raft addresses of the other initial voters (bootstrapped on a fresh\n"
            "data dir); --join: start empty and wait to be ADDed by the leader; --id: this\n"
            "server's raft id (default: derived from its raft address, as for --peers).\n");
    exit(2);
}

static unsigned parse_unsigned(const char *text, const char *flag)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v == 0 || v > 1000000000UL)
        die("%s: not a positive number: %s", flag, text);
    return (unsigned)v;
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},        {"client-port", required_argument, NULL, 'c'},
        {"raft-port", required_argument, NULL, 'r'},     {"peers", required_argument, NULL, 'p'},
        {"data", required_argument, NULL, 'd'},          {"join", no_argument, NULL, 'j'},
        {"election-ms", required_argument, NULL, 'e'},   {"heartbeat-ms", required_argument, NULL, 'h'},
        {"snapshot-threshold", required_argument, NULL, 't'}, {"snapshot-trailing", required_argument, NULL, 'T'},
        {"connect-retry-ms", required_argument, NULL, 'R'}, {"pre-vote", no_argument, NULL, 'v'},
        {"id", required_argument, NULL, 'i'},            {NULL, 0, NULL, 0},
    };
    unsigned raft_port = 0;
    const char *peers = "";
    S.election_ms = 1000;
    S.heartbeat_ms = 100;
    S.snapshot_threshold = 1024;
    S.snapshot_trailing = 128;
    S.connect_retry_ms = 1000;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            if (strlen(optarg) >= sizeof S.listen_ip)
                die("--listen: not an IPv4 address: %s", optarg);
            snprintf(S.listen_ip, sizeof S.listen_ip, "%s", optarg);
            break;
        case 'c': S.client_port = (int)parse_unsigned(optarg, "--client-port"); break;
        case 'r': raft_port = parse_unsigned(optarg, "--raft-port"); break;
        case 'p': peers = optarg; break;
        case 'd': snprintf(S.data_dir, sizeof S.data_dir, "%s", optarg); break;
        case 'j': S.join = 1; break;
        case 'e': S.election_ms = parse_unsigned(optarg, "--election-ms"); break;
        case 'h': S.heartbeat_ms = parse_unsigned(optarg, "--heartbeat-ms"); break;
        case 't': S.snapshot_threshold = parse_unsigned(optarg, "--snapshot-threshold"); break;
        case 'T': S.snapshot_trailing = parse_unsigned(optarg, "--snapshot-trailing"); break;
        case 'R': S.connect_retry_ms = parse_unsigned(optarg, "--connect-retry-ms"); break;
        case 'v': S.pre_vote = 1; break;
        case 'i':
            S.id = parse_id(optarg);
            if (S.id == 0)
                die("--id: not a positive number: %s", optarg);
            break;
        default: usage();
        }
    }
    if (optind != argc || !S.listen_ip[0] || !S.client_port || !raft_port || !S.data_dir[0])
        usage();
    if (raft_port > 65535 || S.client_port > 65535)
        die("ports are 1..65535");
    if (S.heartbeat_ms >= S.election_ms)
        die("--heartbeat-ms (%u) must be below --election-ms (%u)", S.heartbeat_ms, S.election_ms);
    snprintf(S.address, sizeof S.address, "%s:%u", S.listen_ip, raft_port);
    if (S.id == 0)
        S.id = id_of(S.address);
    snprintf(S.cluster[S.ncluster++], ADDR_LEN, "%s", S.address);
    char *copy = strdup(peers), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (S.ncluster == MAX_NODES)
            die("--peers: at most %d nodes", MAX_NODES);
        if (strchr(tok, ':') == NULL || strlen(tok) >= ADDR_LEN)
            die("--peers: not an ip:port address: %s", tok);
        snprintf(S.cluster[S.ncluster++], ADDR_LEN, "%s", tok);
    }
    free(copy);
}

static void check(int rv, const char *what)
{
    if (rv != 0)
        die("%s: %s (%s)", what, raft_strerror(rv), raft_errmsg(&S.raft));
}

static void bootstrap_if_pristine(void)
{
    if (S.join) {
        say("joining: no bootstrap, waiting to be added by the leader");
        return;
    }
    if (!dir_is_empty(S.data_dir)) {
        say("data dir %s holds state: no bootstrap", S.data_dir);
        return;
    }
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (int i = 0; i < S.ncluster; i++)
        check(raft_configuration_add(&conf, i == 0 ? S.id : id_of(S.cluster[i]), S.cluster[i], RAFT_VOTER),
              "configuration");
    int rv = raft_bootstrap(&S.raft, &conf);
    raft_configuration_close(&conf);
    check(rv, "raft_bootstrap");
    say("bootstrapped a %d-voter configuration", S.ncluster);
}

static void listen_clients(void)
{
    struct sockaddr_in addr;
    if (uv_ip4_addr(S.listen_ip, S.client_port, &addr) != 0)
        die("--listen: not an IPv4 address: %s", S.listen_ip);
    uv_tcp_init(&S.loop, &S.listener);
    int rv = uv_tcp_bind(&S.listener, (const struct sockaddr *)&addr, 0);
    if (rv == 0)
        rv = uv_listen((uv_stream_t *)&S.listener, 128, on_connection);
    if (rv != 0)
        die("client port %s:%d: %s", S.listen_ip, S.client_port, uv_strerror(rv));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    parse_args(argc, argv);
    F.result_cap = 256;
    F.result = malloc(F.result_cap);

    uv_loop_init(&S.loop);
    check(raft_uv_tcp_init(&S.transport, &S.loop), "raft_uv_tcp_init");
    check(raft_uv_init(&S.io, &S.loop, S.data_dir, &S.transport), "raft_uv_init");
    raft_uv_set_connect_retry_delay(&S.io, S.connect_retry_ms);
    S.fsm = (struct raft_fsm){
        .version = 2,
        .apply = fsm_apply,
        .snapshot = fsm_snapshot,
        .restore = fsm_restore,
        .snapshot_finalize = fsm_snapshot_finalize,
    };
    check(raft_init(&S.raft, &S.io, &S.fsm, S.id, S.address), "raft_init");
    raft_set_election_timeout(&S.raft, S.election_ms);
    raft_set_heartbeat_timeout(&S.raft, S.heartbeat_ms);
    raft_set_snapshot_threshold(&S.raft, S.snapshot_threshold);
    raft_set_snapshot_trailing(&S.raft, S.snapshot_trailing);
    raft_set_pre_vote(&S.raft, S.pre_vote != 0);
    bootstrap_if_pristine();
    check(raft_start(&S.raft), "raft_start");
    say("started: id %llu, clients on %s:%d, election %u ms, heartbeat %u ms, snapshot every %u (keep %u)",
        S.raft.id, S.listen_ip, S.client_port, S.election_ms, S.heartbeat_ms, S.snapshot_threshold,
        S.snapshot_trailing);

    listen_clients();
    uv_check_init(&S.loop, &S.watcher);
    uv_check_start(&S.watcher, watch);
    uv_signal_init(&S.loop, &S.sigterm);
    uv_signal_start(&S.sigterm, on_signal, SIGTERM);
    uv_signal_init(&S.loop, &S.sigint);
    uv_signal_start(&S.sigint, on_signal, SIGINT);
    S.last_state = RAFT_UNAVAILABLE;

    uv_run(&S.loop, UV_RUN_DEFAULT);
    int rv = uv_loop_close(&S.loop);
    kv_clear();
    free(F.result);
    printf("[raft-kv %s] stopped%s\n", S.address, rv == 0 ? "" : " (loop still had handles)");
    return 0;
}
