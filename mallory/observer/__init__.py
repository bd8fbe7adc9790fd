"""Per-node capture: NFQUEUE packets, the shared-memory event ring, batching to the mediator."""
