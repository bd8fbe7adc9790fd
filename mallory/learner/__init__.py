"""States (MinHash + LSH), rewards and policies. Pure Python: no sockets, no subprocess."""
