"""Per-node capture at run time: NFQUEUE packets (INPUT/OUTPUT), the shared-memory event
ring written by the instrumented SUT, log-derived events, batching to the mediator."""
