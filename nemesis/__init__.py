"""The fault catalogue: how each fault is enacted, verified and healed (`faults/`, through
the cluster backend and the adapter protocols), offered to the learner by `nemesis.Nemesis`,
and the preload shim for clock and disk faults (`preload/`)."""
