"""The fault catalogue and how each fault is enacted and healed, per cluster backend."""
