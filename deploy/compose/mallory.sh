#!/bin/sh
# `mallory` in the project's image: Mallory runs from its source in /opt/mallory.
exec python3 -m mallory.cli "$@"
