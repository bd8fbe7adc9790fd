"""Mallory: a greybox fuzzer for distributed systems."""

__version__ = "0.1.0"
