"""Fault families: one module each (partition, process, packet, clock, disk, membership)."""
