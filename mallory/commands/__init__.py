"""Subcommands of `mallory`, one module each (see mallory/cli.py for the contract)."""
