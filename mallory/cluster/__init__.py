"""Cluster backends: the protocol adapters and the nemesis drive nodes through (`backend`),
network namespaces (`netns`), the containers of a compose project (`docker`), plain
processes on loopback for adapter development (`loopback`), what the journaled backends
share (`journaled`), and the run registry that `mallory cleanup` reads (`registry`).
Knows nothing of SUTs, workloads or campaigns."""
