int store_commit(int key)
{
    int ok = key >= 0;
    if (ok) {
        // INSTRUMENT_BLOCK committed
        key += 1;
    }
    return key;
}
