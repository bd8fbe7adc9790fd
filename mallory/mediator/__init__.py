"""The gateway: firewall, batch ingestion, HTTP API, the campaign loop."""
