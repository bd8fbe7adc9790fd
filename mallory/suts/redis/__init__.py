"""Redis 7: replication (`replication`) and the instrumented build with Sentinel
(`sentinel`, `build`), their RESP clients (`client`, `sentinel_client`)."""
