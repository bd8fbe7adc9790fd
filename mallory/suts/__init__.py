"""One package per built-in system under test (its adapter, client and build), and the
registry that makes them by name (`registry`). The sources, specs and annotations of the
shipped SUTs live in the top-level `suts/` directory."""
