/*
 * example-sut: a small replicated key-value register (Raft-lite), Mallory's own SUT for
 * fast tests and the annotation tutorial (see README.md next to this file).
 *
 * N nodes, one leader elected by timeout, every client operation (GET, PUT, CAS) goes
 * through the replicated log and is answered when it is applied, so without seeded bugs
 * the service is linearizable. Term, vote and log persist in the data directory, so a
 * killed node restarts with what it promised.
 *
 * Peer protocol, one text line per message on TCP (requests on the connection the sender
 * opened, replies on the same connection):
 *   V term candidate lastIndex lastTerm            vote request
 *   v term granted                                 vote reply
 *   A term leader prevIndex prevTerm commit n e..  append (n entries "term,op,key,val,exp")
 *   a term success index hasLeader                 append reply (index: match or last index)
 * Client protocol on the client port, one line each way:
 *   GET k | PUT k v | CAS k old new  ->  OK [value|nil] | FAIL mismatch |
 *   ERR not-leader <leader address or -> | UNKNOWN <why> (outcome unknown)
 *
 * Seeded bugs, off unless --bugs LIST or EXAMPLE_BUGS=LIST names them ("all" or "1": all);
 * README.md gives the fault sequence that surfaces each and the oracle that flags it:
 *   sticky-leader  a leader that hears of a term 3 or more ahead from a node without a
 *                  leader adopts that term and stays leader instead of stepping down;
 *   stall-catchup  a node that notices it was stalled applies up to the leader's commit
 *                  index before checking that its log matches the leader's.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PEERS 8
#define MAX_CLIENTS 64
#define MAX_INBOUND 32
#define MAX_KEYS 65536  /* a campaign gives every schedule fresh keys: thousands a day */
#define TOKEN 32
#define LINE_MAX_LEN 65536
#define BATCH 32

enum role { FOLLOWER, CANDIDATE, LEADER };
static const char *role_names[] = {"follower", "candidate", "leader"};

struct entry {
    long term;
    char op; /* G, P, C */
    char key[TOKEN], val[TOKEN], exp[TOKEN];
    int client;       /* client slot waiting for the answer (leader only), -1 none */
    long client_gen;  /* that slot's generation, so a reused slot gets no stale answer */
};

struct conn {
    int fd;
    long gen;
    in_addr_t from; /* inbound peer connections: the peer's address */
    size_t len;
    char buf[LINE_MAX_LEN];
};

struct peer {
    char addr[64];  /* "ip:port" of its peer port: its identity */
    char host[48];
    int port;
    struct conn out;        /* our connection to it: requests out, replies in */
    int connecting;
    double retry_at;
    double opened_at;       /* when the connect began */
    double awaiting_since;  /* first request sent since the last reply (0: none) */
    long next_index, match_index;
    int voted_for_me;
};

static struct {
    char self[64];
    char host[48];
    int peer_port, client_port;
    char data_dir[512];
    int npeers;
    struct peer peers[MAX_PEERS];
    enum role role;
    long term;
    char voted_for[64];
    char leader[64];
    struct entry *log; /* log[1..last] */
    long last, cap;
    long commit, applied;
    char keys[MAX_KEYS][TOKEN], vals[MAX_KEYS][TOKEN];
    int nkeys;
    double election_deadline, next_heartbeat, loop_seen;
    int election_ms, heartbeat_ms;
    int bug_sticky_leader, bug_stall_catchup;
    int stalled;
    int peer_listener, client_listener;
    struct conn inbound[MAX_INBOUND];
    struct conn clients[MAX_CLIENTS];
    long gen_counter;
} S;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void say(const char *fmt, ...)
{
    va_list ap;
    printf("[%s term %ld %s] ", S.self, S.term, role_names[S.role]);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static void die_assert(const char *what, long a, long b)
{
    say("assertion failed: %s (%ld, %ld)", what, a, b);
    fflush(stdout);
    abort();
}

static long term_at(long index)
{
    return index >= 1 && index <= S.last ? S.log[index].term : 0;
}

/* -- persistence: raft.state holds "term votedFor", raft.log one entry per line -------- */

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", S.data_dir, name);
}

/* A node that cannot persist what it is about to promise stops (fail-stop): Raft survives
 * a dead node, not one that forgets its vote or its log. */
static void cannot_persist(const char *what)
{
    say("stopping: cannot persist %s: %s", what, strerror(errno));
    exit(1);
}

/* Write a whole file through a temporary and rename it over the old one. */
static FILE *open_tmp(const char *name, char *tmp, size_t n)
{
    snprintf(tmp, n, "%s/%s.tmp", S.data_dir, name);
    FILE *f = fopen(tmp, "w");
    if (!f) cannot_persist(name);
    return f;
}

/* Flush, fsync and close; nonzero on any error. What a node acknowledges must survive a
 * crash of the machine, not only of the process: without the fsync, Mallory's
 * disk:lose-unsynced fault made a restarted follower truncate committed entries
 * ("truncating a committed entry"), a real bug it found in this SUT. */
static int durable_close(FILE *f)
{
    int bad = ferror(f) | (fflush(f) != 0) | (fsync(fileno(f)) != 0);
    return (fclose(f) != 0) | bad;
}

static void commit_tmp(FILE *f, const char *name, const char *tmp)
{
    char path[600];
    path_of(path, sizeof path, name);
    if (durable_close(f) || rename(tmp, path)) cannot_persist(name);
}

static void persist_state(void)
{
    char tmp[620];
    FILE *f = open_tmp("raft.state", tmp, sizeof tmp);
    fprintf(f, "%ld %s\n", S.term, S.voted_for[0] ? S.voted_for : "-");
    commit_tmp(f, "raft.state", tmp);
}

static void write_entry(FILE *f, const struct entry *e)
{
    fprintf(f, "%ld,%c,%s,%s,%s\n", e->term, e->op, e->key, e->val[0] ? e->val : "-", e->exp[0] ? e->exp : "-");
}

static void rewrite_log(void)
{
    char tmp[620];
    FILE *f = open_tmp("raft.log", tmp, sizeof tmp);
    for (long i = 1; i <= S.last; i++) write_entry(f, &S.log[i]);
    commit_tmp(f, "raft.log", tmp);
}

static void append_log_line(const struct entry *e)
{
    char path[600];
    path_of(path, sizeof path, "raft.log");
    FILE *f = fopen(path, "a");
    if (!f) cannot_persist("raft.log");
    write_entry(f, e);
    if (durable_close(f)) cannot_persist("raft.log");
}

static int parse_entry(const char *text, struct entry *e)
{
    char val[TOKEN], exp[TOKEN];
    memset(e, 0, sizeof *e);
    e->client = -1;
    if (sscanf(text, "%ld,%c,%31[^,],%31[^,],%31s", &e->term, &e->op, e->key, val, exp) != 5) return -1;
    strcpy(e->val, strcmp(val, "-") ? val : "");
    strcpy(e->exp, strcmp(exp, "-") ? exp : "");
    return 0;
}

static void log_push(const struct entry *e)
{
    if (S.last + 1 >= S.cap) {
        S.cap = S.cap ? S.cap * 2 : 1024;
        S.log = realloc(S.log, S.cap * sizeof *S.log);
        if (!S.log) { perror("realloc"); exit(1); }
    }
    S.log[++S.last] = *e;
}

static void load_persistent(void)
{
    char path[600], line[256], voted[64];
    path_of(path, sizeof path, "raft.state");
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%ld %63s", &S.term, voted) == 2 && strcmp(voted, "-")) strcpy(S.voted_for, voted);
        fclose(f);
    }
    path_of(path, sizeof path, "raft.log");
    f = fopen(path, "r");
    if (f) {
        struct entry e;
        /* a line without its newline is a write cut short: never acknowledged */
        while (fgets(line, sizeof line, f) && strchr(line, '\n') && parse_entry(line, &e) == 0) log_push(&e);
        fclose(f);
    }
    rewrite_log(); /* drop whatever did not parse, so appends start on a clean line */
    say("restored %ld log entries", S.last);
}

/* -- sockets ---------------------------------------------------------------------------- */

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    inet_pton(AF_INET, S.host, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0) {
        fprintf(stderr, "cannot listen on %s:%d: %s\n", S.host, port, strerror(errno));
        exit(1);
    }
    return fd;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->len = 0;
}

/* Close with a reset (SO_LINGER 0): whatever is still queued is dropped, not delivered
 * late; a peer that stopped answering gets a fresh connection and only fresh messages. */
static void conn_reset(struct conn *c)
{
    struct linger off = {1, 0};
    if (c->fd >= 0) setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    conn_close(c);
}

/* One whole line or nothing: a message that cannot go out at once is dropped (Raft
 * retries), and a partial write would corrupt the stream, so that connection is closed. */
static void send_line(struct conn *c, const char *line)
{
    size_t n = strlen(line);
    if (c->fd < 0) return;
    ssize_t w = send(c->fd, line, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w != (ssize_t)n && !(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) conn_close(c);
}

static void send_peer(struct peer *p, const char *line)
{
    if (p->out.fd < 0 || p->connecting) return;
    if (!p->awaiting_since) p->awaiting_since = now_ms();
    send_line(&p->out, line);
}

static void peer_connect(struct peer *p, double now)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p->port)};
    struct sockaddr_in self = {.sin_family = AF_INET};
    int one = 1;
    inet_pton(AF_INET, p->host, &a.sin_addr);
    inet_pton(AF_INET, S.host, &self.sin_addr);
    p->out.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(p->out.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* From our own address: a peer knows us by the source address (accept_into keeps one
     * connection per address), and on loopback the kernel would otherwise pick 127.0.0.1
     * for every node, so two peers' connections kept replacing each other. */
    bind(p->out.fd, (struct sockaddr *)&self, sizeof self);
    p->out.len = 0;
    p->connecting = 1;
    p->opened_at = now;
    p->awaiting_since = 0;
    p->retry_at = now + 100;
    if (connect(p->out.fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) conn_close(&p->out);
}

/* -- replication ------------------------------------------------------------------------- */

static void send_append(struct peer *p)
{
    static char line[LINE_MAX_LEN];
    if (p->out.fd < 0 || p->connecting) return;
    long prev = p->next_index - 1;
    long n = S.last - prev;
    if (n > BATCH) n = BATCH;
    if (n < 0) n = 0;
    int len = snprintf(line, sizeof line, "A %ld %s %ld %ld %ld %ld", S.term, S.self, prev, term_at(prev), S.commit, n);
    for (long i = prev + 1; i <= prev + n; i++) {
        const struct entry *e = &S.log[i];
        len += snprintf(line + len, sizeof line - len, " %ld,%c,%s,%s,%s", e->term, e->op, e->key,
                        e->val[0] ? e->val : "-", e->exp[0] ? e->exp : "-");
    }
    snprintf(line + len, sizeof line - len, "\n");
    // INSTRUMENT_BLOCK replicate
    send_peer(p, line);
}

static void broadcast_append(void)
{
    for (int i = 0; i < S.npeers; i++) send_append(&S.peers[i]);
    S.next_heartbeat = now_ms() + S.heartbeat_ms;
}

static void reset_election_timer(void)
{
    S.election_deadline = now_ms() + S.election_ms + rand() % (S.election_ms + 1);
}

static void answer_client(int slot, long gen, const char *text)
{
    if (slot < 0 || slot >= MAX_CLIENTS || S.clients[slot].fd < 0 || S.clients[slot].gen != gen) return;
    send_line(&S.clients[slot], text);
}

/* Entries this node appended as leader and has not applied lose their waiting client: the
 * entry may still commit under another leader, so the answer is "unknown". */
static void abandon_clients(const char *why)
{
    char msg[80];
    snprintf(msg, sizeof msg, "UNKNOWN %s\n", why);
    for (long i = S.applied + 1; i <= S.last; i++) {
        answer_client(S.log[i].client, S.log[i].client_gen, msg);
        S.log[i].client = -1;
    }
}

// INSTRUMENT_FUNC stepped-down
static void step_down(long term, const char *why)
{
    enum role was = S.role;
    if (term > S.term) {
        S.term = term;
        S.voted_for[0] = 0;
        persist_state();
    }
    S.role = FOLLOWER;
    if (was != FOLLOWER) {
        S.leader[0] = 0; /* until a leader of this term speaks */
        reset_election_timer();
        abandon_clients("stepped-down");
        say("stepped down (%s)", why);
    }
}

static const char *kv_get(const char *key)
{
    for (int i = 0; i < S.nkeys; i++)
        if (!strcmp(S.keys[i], key)) return S.vals[i];
    return NULL;
}

static void kv_put(const char *key, const char *val)
{
    for (int i = 0; i < S.nkeys; i++)
        if (!strcmp(S.keys[i], key)) { strcpy(S.vals[i], val); return; }
    if (S.nkeys == MAX_KEYS) die_assert("key space full", S.nkeys, MAX_KEYS);
    strcpy(S.keys[S.nkeys], key);
    strcpy(S.vals[S.nkeys++], val);
}

// INSTRUMENT_FUNC apply
static void apply_entry(struct entry *e)
{
    char reply[80];
    const char *cur = kv_get(e->key);
    if (e->op == 'G') {
        snprintf(reply, sizeof reply, "OK %s\n", cur ? cur : "nil");
    } else if (e->op == 'P') {
        kv_put(e->key, e->val);
        snprintf(reply, sizeof reply, "OK\n");
    } else if (cur && !strcmp(cur, e->exp)) {
        kv_put(e->key, e->val);
        snprintf(reply, sizeof reply, "OK\n");
    } else {
        snprintf(reply, sizeof reply, "FAIL mismatch\n");
    }
    answer_client(e->client, e->client_gen, reply);
    e->client = -1;
}

// INSTRUMENT_FUNC commit
static void advance_commit(long to)
{
    if (to > S.last) die_assert("commit index beyond the log", to, S.last);
    if (to <= S.commit) return;
    S.commit = to;
    while (S.applied < S.commit) apply_entry(&S.log[++S.applied]);
}

static void leader_commit_rule(void)
{
    for (long n = S.last; n > S.commit && S.log[n].term == S.term; n--) {
        int votes = 1;
        for (int i = 0; i < S.npeers; i++) votes += S.peers[i].match_index >= n;
        if (votes * 2 > S.npeers + 1) {
            advance_commit(n);
            say("committed up to %ld", n);
            return;
        }
    }
}

// INSTRUMENT_FUNC became-leader
static void become_leader(void)
{
    S.role = LEADER;
    strcpy(S.leader, S.self);
    for (int i = 0; i < S.npeers; i++) {
        S.peers[i].next_index = S.last + 1;
        S.peers[i].match_index = 0;
    }
    say("became leader with %ld log entries (commit %ld)", S.last, S.commit);
    /* A no-op of the new term lets the commit rule reach the entries of earlier terms. */
    struct entry noop = {.term = S.term, .op = 'G', .key = "_", .client = -1};
    log_push(&noop);
    append_log_line(&noop);
    broadcast_append();
}

// INSTRUMENT_FUNC election-started
static void start_election(void)
{
    char line[160];
    S.role = CANDIDATE;
    S.term++;
    strcpy(S.voted_for, S.self);
    S.leader[0] = 0;
    persist_state();
    reset_election_timer();
    for (int i = 0; i < S.npeers; i++) S.peers[i].voted_for_me = 0;
    say("election started");
    if (S.npeers == 0) { become_leader(); return; }
    snprintf(line, sizeof line, "V %ld %s %ld %ld\n", S.term, S.self, S.last, term_at(S.last));
    for (int i = 0; i < S.npeers; i++) send_peer(&S.peers[i], line);
}

/* A higher term seen by a leader. Correct: step down. With sticky-leader, a leader that
 * hears of a term STICKY_GAP or more ahead from a node without a leader (a candidate that
 * has been flapping, or a follower whose leader is gone) takes that term over and stays
 * leader, "sparing the cluster a disruptive election". */
#define STICKY_GAP 3
static int leader_keeps_term(long term, int from_leaderless)
{
    if (S.role == LEADER && S.bug_sticky_leader && from_leaderless && term - S.term >= STICKY_GAP) {
        // INSTRUMENT_BLOCK sticky-leader-kept-term
        S.term = term;
        strcpy(S.voted_for, S.self);
        persist_state();
        say("kept leadership into a higher term");
        broadcast_append();
        return 1;
    }
    return 0;
}

/* -- peer messages --------------------------------------------------------------------- */

static void on_vote_request(struct conn *c, char *args)
{
    long term, last_index, last_term;
    char cand[64], reply[64];
    if (sscanf(args, "%ld %63s %ld %ld", &term, cand, &last_index, &last_term) != 4) return;
    if (term > S.term && !leader_keeps_term(term, 1)) step_down(term, "vote request of a higher term");
    int up_to_date = last_term > term_at(S.last) || (last_term == term_at(S.last) && last_index >= S.last);
    int grant = term == S.term && S.role == FOLLOWER && up_to_date && (!S.voted_for[0] || !strcmp(S.voted_for, cand));
    if (grant) {
        strcpy(S.voted_for, cand);
        persist_state();
        reset_election_timer();
    }
    snprintf(reply, sizeof reply, "v %ld %d\n", S.term, grant);
    send_line(c, reply);
}

// INSTRUMENT_FUNC truncate
static void truncate_log(long from)
{
    if (from <= S.commit) die_assert("truncating a committed entry", from, S.commit);
    say("truncated the log from %ld (last %ld)", from, S.last);
    S.last = from - 1;
    rewrite_log();
}

// INSTRUMENT_FUNC append-received
static void on_append(struct conn *c, char *args)
{
    long term, prev, prev_term, leader_commit, n;
    char leader[64], reply[96];
    int off = 0;
    if (sscanf(args, "%ld %63s %ld %ld %ld %ld%n", &term, leader, &prev, &prev_term, &leader_commit, &n, &off) != 6) return;
    if (term < S.term) {
        snprintf(reply, sizeof reply, "a %ld 0 %ld %d\n", S.term, S.last, S.leader[0] != 0);
        send_line(c, reply);
        return;
    }
    if (S.role == LEADER && term == S.term) die_assert("two leaders in one term", term, S.term);
    if (S.stalled && S.bug_stall_catchup) {
        /* stall-catchup: back from a stall, trust the leader's commit index at once,
         * before stepping down and before checking that our log matches the leader's. */
        long to = leader_commit < S.last ? leader_commit : S.last;
        if (to > S.commit) {
            // INSTRUMENT_BLOCK stall-catchup-applied
            say("caught up after a stall: applying up to %ld", to);
            advance_commit(to);
        }
    }
    if (term > S.term || S.role != FOLLOWER) step_down(term, "append from a leader");
    if (strcmp(S.leader, leader)) say("following leader %s", leader);
    strcpy(S.leader, leader);
    reset_election_timer();
    /* Every leader holds every committed entry (Leader Completeness), so a mismatch at or
     * below our commit index means a broken invariant, never a normal conflict. */
    if (prev <= S.commit && term_at(prev) != prev_term) die_assert("log mismatch below the commit index", prev, S.commit);
    if (prev > S.last || term_at(prev) != prev_term) {
        snprintf(reply, sizeof reply, "a %ld 0 %ld 1\n", S.term, prev > S.last ? S.last : prev - 1);
        send_line(c, reply);
        return;
    }
    char *p = args + off;
    long index = prev;
    for (long k = 0; k < n; k++) {
        char tok[160];
        int used;
        struct entry e;
        if (sscanf(p, "%159s%n", tok, &used) != 1 || parse_entry(tok, &e) != 0) return;
        p += used;
        index++;
        if (index <= S.last && S.log[index].term == e.term) continue;
        if (index <= S.last) truncate_log(index);
        log_push(&e);
        append_log_line(&e);
    }
    long last_new = prev + n;
    if (leader_commit > S.commit) advance_commit(leader_commit < last_new ? leader_commit : last_new);
    snprintf(reply, sizeof reply, "a %ld 1 %ld 1\n", S.term, last_new);
    send_line(c, reply);
}

static void on_vote_reply(struct peer *p, char *args)
{
    long term;
    int granted;
    if (sscanf(args, "%ld %d", &term, &granted) != 2) return;
    if (term > S.term) { step_down(term, "vote reply of a higher term"); return; }
    if (S.role != CANDIDATE || term != S.term || !granted) return;
    p->voted_for_me = 1;
    int votes = 1;
    for (int i = 0; i < S.npeers; i++) votes += S.peers[i].voted_for_me;
    if (votes * 2 > S.npeers + 1) become_leader();
}

static void on_append_reply(struct peer *p, char *args)
{
    long term, index;
    int success, has_leader;
    if (sscanf(args, "%ld %d %ld %d", &term, &success, &index, &has_leader) != 4) return;
    if (term > S.term) {
        if (!leader_keeps_term(term, !has_leader)) step_down(term, "append reply of a higher term");
        return;
    }
    if (S.role != LEADER || term != S.term) return;
    if (success) {
        if (index > p->match_index) p->match_index = index;
        p->next_index = p->match_index + 1;
        leader_commit_rule();
        if (p->next_index <= S.last) send_append(p);
    } else {
        p->next_index = index + 1 < p->next_index - 1 ? index + 1 : p->next_index - 1;
        if (p->next_index < 1) p->next_index = 1;
        send_append(p);
    }
}

/* -- clients ------------------------------------------------------------------------------ */

static int valid_token(const char *s)
{
    if (!*s || strlen(s) >= TOKEN || !strcmp(s, "-")) return 0;
    for (; *s; s++)
        if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') || ('0' <= *s && *s <= '9') || *s == '_' || *s == '-')) return 0;
    return 1;
}

static void on_client_line(int slot, char *line)
{
    struct conn *c = &S.clients[slot];
    char cmd[8], key[64] = "", a[64] = "", b[64] = "", reply[128];
    int n = sscanf(line, "%7s %63s %63s %63s", cmd, key, a, b);
    struct entry e = {.term = S.term, .client = slot, .client_gen = c->gen};
    if (n >= 2 && !strcmp(cmd, "GET")) e.op = 'G';
    else if (n >= 3 && !strcmp(cmd, "PUT")) { e.op = 'P'; strcpy(e.val, a); }
    else if (n >= 4 && !strcmp(cmd, "CAS")) { e.op = 'C'; strcpy(e.exp, a); strcpy(e.val, b); }
    if (!e.op || !valid_token(key) || (e.op != 'G' && !valid_token(e.val)) || (e.op == 'C' && !valid_token(e.exp))) {
        send_line(c, "ERR bad-request\n");
        return;
    }
    if (S.role != LEADER) {
        char host[64] = "-";
        if (S.leader[0]) { strcpy(host, S.leader); *strrchr(host, ':') = 0; }
        snprintf(reply, sizeof reply, "ERR not-leader %s\n", host);
        send_line(c, reply);
        return;
    }
    strcpy(e.key, key);
    // INSTRUMENT_BLOCK client-request
    log_push(&e);
    append_log_line(&e);
    if (S.npeers == 0) leader_commit_rule();
    broadcast_append();
}

/* -- the loop ------------------------------------------------------------------------------ */

typedef void (*line_handler)(struct conn *c, char *line, void *ctx);

/* Read what is there; call `handle` for each complete line. 0 when the peer closed. */
static int read_lines(struct conn *c, line_handler handle, void *ctx)
{
    ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return 0;
    if (r < 0) return 1;
    c->len += r;
    char *start = c->buf, *nl;
    while (c->fd >= 0 && (nl = memchr(start, '\n', c->buf + c->len - start))) {
        *nl = 0;
        handle(c, start, ctx);
        start = nl + 1;
    }
    if (c->fd < 0) return 0;
    c->len -= start - c->buf;
    memmove(c->buf, start, c->len);
    if (c->len == sizeof c->buf - 1) return 0; /* a line longer than any message */
    return 1;
}

static void handle_inbound(struct conn *c, char *line, void *ctx)
{
    (void)ctx;
    if (line[0] == 'V' && line[1] == ' ') on_vote_request(c, line + 2);
    else if (line[0] == 'A' && line[1] == ' ') on_append(c, line + 2);
}

static void handle_reply(struct conn *c, char *line, void *ctx)
{
    (void)c;
    ((struct peer *)ctx)->awaiting_since = 0;
    if (line[0] == 'v' && line[1] == ' ') on_vote_reply(ctx, line + 2);
    else if (line[0] == 'a' && line[1] == ' ') on_append_reply(ctx, line + 2);
}

static void handle_client(struct conn *c, char *line, void *ctx)
{
    (void)ctx;
    on_client_line((int)(c - S.clients), line);
}

/* Accept one connection into a free slot; NULL if none. A peer keeps one connection to
 * us, so a new one from the same address replaces the old (which it abandoned). */
static struct conn *accept_into(int listener, struct conn *slots, int nslots, int one_per_address)
{
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    int fd = accept4(listener, (struct sockaddr *)&from, &len, SOCK_NONBLOCK), one = 1;
    if (fd < 0) return NULL;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (one_per_address)
        for (int i = 0; i < nslots; i++)
            if (slots[i].fd >= 0 && slots[i].from == from.sin_addr.s_addr) conn_reset(&slots[i]);
    for (int i = 0; i < nslots; i++)
        if (slots[i].fd < 0) {
            slots[i].fd = fd;
            slots[i].len = 0;
            slots[i].gen = ++S.gen_counter;
            slots[i].from = from.sin_addr.s_addr;
            return &slots[i];
        }
    close(fd);
    return NULL;
}

static void timers(double now)
{
    if (S.role == LEADER) {
        if (now >= S.next_heartbeat) broadcast_append();
    } else if (now >= S.election_deadline) {
        // INSTRUMENT_BLOCK heartbeat-timeout
        say("heartbeat timeout (leader %s)", S.leader[0] ? S.leader : "-");
        start_election();
    }
    for (int i = 0; i < S.npeers; i++) {
        struct peer *p = &S.peers[i];
        int stuck = p->connecting ? now - p->opened_at > S.election_ms
                                  : p->awaiting_since && now - p->awaiting_since > 2 * S.election_ms;
        if (p->out.fd >= 0 && stuck) {
            conn_reset(&p->out);
            p->retry_at = now;
        }
        if (p->out.fd < 0 && now >= p->retry_at) peer_connect(p, now);
    }
}

static void run(void)
{
    struct pollfd pfd[2 + MAX_PEERS + MAX_INBOUND + MAX_CLIENTS];
    void *owner[2 + MAX_PEERS + MAX_INBOUND + MAX_CLIENTS];
    S.loop_seen = now_ms();
    for (;;) {
        int n = 0;
        pfd[n] = (struct pollfd){S.peer_listener, POLLIN, 0}; owner[n++] = &S.peer_listener;
        pfd[n] = (struct pollfd){S.client_listener, POLLIN, 0}; owner[n++] = &S.client_listener;
        for (int i = 0; i < S.npeers; i++)
            if (S.peers[i].out.fd >= 0) {
                pfd[n] = (struct pollfd){S.peers[i].out.fd, S.peers[i].connecting ? POLLOUT : POLLIN, 0};
                owner[n++] = &S.peers[i];
            }
        for (int i = 0; i < MAX_INBOUND; i++)
            if (S.inbound[i].fd >= 0) { pfd[n] = (struct pollfd){S.inbound[i].fd, POLLIN, 0}; owner[n++] = &S.inbound[i]; }
        for (int i = 0; i < MAX_CLIENTS; i++)
            if (S.clients[i].fd >= 0) { pfd[n] = (struct pollfd){S.clients[i].fd, POLLIN, 0}; owner[n++] = &S.clients[i]; }
        poll(pfd, n, 10);
        double now = now_ms();
        /* A loop that did not run for longer than an election timeout was stalled (paused,
         * descheduled): remembered for this round of messages. */
        S.stalled = now - S.loop_seen > S.election_ms;
        if (S.stalled) say("stalled for %.0f ms", now - S.loop_seen);
        S.loop_seen = now;
        /* Peers first, clients last: a node learns of a new term before serving clients. */
        for (int k = 0; k < n; k++) {
            if (!pfd[k].revents) continue;
            if (owner[k] == &S.peer_listener) {
                /* Every waiting connection, each read at once: what queued up during a stall
                 * belongs to this round, whichever peer happened to reconnect first. */
                struct conn *c;
                while ((c = accept_into(S.peer_listener, S.inbound, MAX_INBOUND, 1)))
                    if (!read_lines(c, handle_inbound, NULL)) conn_close(c);
                continue;
            }
            if (owner[k] == &S.client_listener) { accept_into(S.client_listener, S.clients, MAX_CLIENTS, 0); continue; }
            if ((struct conn *)owner[k] >= S.inbound && (struct conn *)owner[k] < S.inbound + MAX_INBOUND) {
                struct conn *c = owner[k];
                if (!read_lines(c, handle_inbound, NULL)) conn_close(c);
                continue;
            }
            if ((struct conn *)owner[k] >= S.clients && (struct conn *)owner[k] < S.clients + MAX_CLIENTS) continue;
            struct peer *p = owner[k];
            if (p->connecting) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(p->out.fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err || (pfd[k].revents & (POLLERR | POLLHUP))) { conn_close(&p->out); continue; }
                p->connecting = 0;
                if (S.role == LEADER) send_append(p);
            } else if (!read_lines(&p->out, handle_reply, p)) {
                conn_close(&p->out);
                p->retry_at = now + 100;
            }
        }
        for (int k = 0; k < n; k++) {
            if (!pfd[k].revents) continue;
            if ((struct conn *)owner[k] >= S.clients && (struct conn *)owner[k] < S.clients + MAX_CLIENTS) {
                struct conn *c = owner[k];
                if (!read_lines(c, handle_client, NULL)) conn_close(c);
            }
        }
        S.stalled = 0;
        timers(now_ms());
    }
}

static void enable_bugs(const char *list)
{
    char copy[256], *save = NULL;
    snprintf(copy, sizeof copy, "%s", list);
    for (char *b = strtok_r(copy, ", ", &save); b; b = strtok_r(NULL, ", ", &save)) {
        int all = !strcmp(b, "all") || !strcmp(b, "1");
        if (all || !strcmp(b, "sticky-leader")) S.bug_sticky_leader = 1;
        if (all || !strcmp(b, "stall-catchup")) S.bug_stall_catchup = 1;
        if (!all && strcmp(b, "sticky-leader") && strcmp(b, "stall-catchup") && strcmp(b, "0") && strcmp(b, "none")) {
            fprintf(stderr, "unknown seeded bug %s (known: sticky-leader, stall-catchup, all)\n", b);
            exit(2);
        }
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: example-sut --listen IP --client-port P --peer-port Q --data DIR "
                    "[--peers IP:Q,...] [--election-ms 300] [--heartbeat-ms 50] [--bugs LIST]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *peers = "", *bugs = getenv("EXAMPLE_BUGS");
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    S.election_ms = 300;
    S.heartbeat_ms = 50;
    for (int i = 1; i < argc; i += 2) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) usage();
        if (!strcmp(opt, "--listen")) snprintf(S.host, sizeof S.host, "%s", val);
        else if (!strcmp(opt, "--client-port")) S.client_port = atoi(val);
        else if (!strcmp(opt, "--peer-port")) S.peer_port = atoi(val);
        else if (!strcmp(opt, "--peers")) peers = val;
        else if (!strcmp(opt, "--data")) snprintf(S.data_dir, sizeof S.data_dir, "%s", val);
        else if (!strcmp(opt, "--election-ms")) S.election_ms = atoi(val);
        else if (!strcmp(opt, "--heartbeat-ms")) S.heartbeat_ms = atoi(val);
        else if (!strcmp(opt, "--bugs")) bugs = val;
        else usage();
    }
    if (!S.host[0] || !S.client_port || !S.peer_port || !S.data_dir[0] || S.election_ms <= 0 || S.heartbeat_ms <= 0) usage();
    if (bugs) enable_bugs(bugs);
    snprintf(S.self, sizeof S.self, "%s:%d", S.host, S.peer_port);
    char copy[1024], *save = NULL;
    snprintf(copy, sizeof copy, "%s", peers);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct peer *p = &S.peers[S.npeers];
        char *colon = strrchr(tok, ':');
        if (S.npeers == MAX_PEERS || !colon) usage();
        snprintf(p->addr, sizeof p->addr, "%s", tok);
        snprintf(p->host, sizeof p->host, "%.*s", (int)(colon - tok), tok);
        p->port = atoi(colon + 1);
        p->out.fd = -1;
        S.npeers++;
    }
    for (int i = 0; i < MAX_INBOUND; i++) S.inbound[i].fd = -1;
    for (int i = 0; i < MAX_CLIENTS; i++) S.clients[i].fd = -1;
    /* Election timeouts must differ between nodes. pid ^ start time did not: nodes started
     * a millisecond apart with consecutive pids drew the same seed, timed out in lockstep
     * and split every vote (a 3-node cluster without a leader, about 1 start in 10). */
    unsigned seed;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = (unsigned)getpid() * 2654435761u ^ (unsigned)(now_ms() * 1e3);
    srand(seed);
    load_persistent();
    S.peer_listener = listen_on(S.peer_port);
    S.client_listener = listen_on(S.client_port);
    say("listening: client port %d, peer port %d, %d peers, bugs:%s%s", S.client_port, S.peer_port, S.npeers,
        S.bug_sticky_leader ? " sticky-leader" : "", S.bug_stall_catchup ? " stall-catchup" : "");
    reset_election_timer();
    run();
}
