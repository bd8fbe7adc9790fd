#include <stdio.h>

int store_commit(int key);

// INSTRUMENT_FUNC request
static int handle(int key)
{
    return store_commit(key);
}

int main(void)
{
    int acc = 0;
    for (int k = -2; k < 3; k++)
        acc += handle(k);
    printf("acc %d\n", acc);
    return 0;
}
