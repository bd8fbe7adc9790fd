"""Bug detection: transactional and linearizability checkers, ASan and log oracles. Pure Python."""
