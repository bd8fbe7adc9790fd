#include <stdio.h>
#include <stdlib.h>

// INSTRUMENT_FUNC tick
static int tick(int x)
{
    if (x % 4 == 0) {
        // INSTRUMENT_BLOCK quarter
        x += 2;
    }
    return x + 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    int s = 0;
    for (int i = 0; i < n; i++)
        s = tick(s);
    printf("%d\n", s);
    return 0;
}
