"""The gateway process: the FORWARD NFQUEUE firewall, batch ingest, the timeline's windows,
the HTTP API (JSON and EDN), the advisor for Jepsen-driven mode, and its client. Imports
no campaign and no command."""

#: where the API listens by default (on the gateway's control address)
API_PORT = 7100
#: where observers send their batches by default (`mallory observe --run` dials it)
BATCH_PORT = 7101
