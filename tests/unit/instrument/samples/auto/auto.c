#include <stdio.h>
#include <stdlib.h>

enum role { FOLLOWER, CANDIDATE, LEADER };

static int step(enum role r)
{
    switch (r) {
    case FOLLOWER:
        return 1;
    case CANDIDATE:
        return 2;
    case LEADER:
        return 3;
    }
    return 0;
}

static int load_config(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror("open config");
        exit(3);
    }
    fclose(f);
    return 1;
}

int handle_vote(int term)
{
    return term + 1;
}

int main(int argc, char **argv)
{
    int role = argc > 1 ? atoi(argv[1]) : 0;
    printf("step %d vote %d\n", step((enum role)role), handle_vote(role));
    if (argc > 2)
        load_config(argv[2]);
    return 0;
}
