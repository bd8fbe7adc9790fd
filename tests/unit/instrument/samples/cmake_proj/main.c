#include <stdio.h>
#include <stdlib.h>

#include "counter.h"

static int rollbacks;

// INSTRUMENT_FUNC snapshot-taken
static void
take_snapshot(int i)
{
    printf("snapshot %d\n", i);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 0; i < n; i++) {
        take_snapshot(i);
        if (i % 3 == 0) {
            // INSTRUMENT_BLOCK rollback
            rollbacks++;
        }
        bump(i);
    }
    printf("rollbacks %d total %d\n", rollbacks, counter_total());
    return 0;
}
