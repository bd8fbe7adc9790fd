#include "counter.h"

static int total;

// INSTRUMENT_FUNC
void counter_add(int v)
{
    total += v;
}

int counter_total(void)
{
    return total;
}
