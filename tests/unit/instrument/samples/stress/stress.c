/* Ring stress writer: THREADS threads in this process and FORKS forked children each write
 * N events straight through the runtime hook. Writer w's i-th event has id (w << 32) | i
 * and kind 1 + (i & 1), so a reader can check every slot it gets for consistency. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

void __mallory_event(uint64_t id, uint32_t kind);

static long n_events;

static void write_all(uint64_t writer)
{
    for (long i = 0; i < n_events; i++)
        __mallory_event((writer << 32) | (uint64_t)i, 1u + (uint32_t)(i & 1));
}

static void *thread_main(void *arg)
{
    write_all((uint64_t)(uintptr_t)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: stress THREADS FORKS N\n");
        return 2;
    }
    int threads = atoi(argv[1]), forks = atoi(argv[2]);
    n_events = atol(argv[3]);
    pid_t kids[64];
    for (int f = 0; f < forks; f++) {
        kids[f] = fork();
        if (kids[f] == 0) {
            write_all((uint64_t)(threads + f));
            _exit(0);
        }
    }
    pthread_t tids[64];
    for (int t = 0; t < threads; t++)
        pthread_create(&tids[t], NULL, thread_main, (void *)(uintptr_t)t);
    for (int t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    int failed = 0;
    for (int f = 0; f < forks; f++) {
        int status;
        waitpid(kids[f], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}
