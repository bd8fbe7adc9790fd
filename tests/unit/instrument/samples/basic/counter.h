#ifndef COUNTER_H
#define COUNTER_H

void counter_add(int v);
int counter_total(void);

static inline void bump(int i)
{
    if (i % 2 == 1) {
        // INSTRUMENT_BB odd-bump
        counter_add(i);
    }
}

#endif
