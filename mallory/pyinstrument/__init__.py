"""Python-level instrumentation: code events from Python programs into the node's ring.

The same events as the LLVM pass's (llvm-pass/RING.md): FUNC/BLOCK kinds, ids from
`mallory.instrument.event_ids.event_id` (FNV-1a of "relpath:line:KIND"), written through the
C runtime itself (`libmallory_rt.so`, loaded with ctypes), so the ring protocol is not
re-implemented and Python and C writers can share one ring.

Two ways to mark code:

* `# INSTRUMENT_FUNC [label]` / `# INSTRUMENT_BLOCK [label]` comments in sources you own,
  under a directory given with `--annotated DIR`: modules imported from there (and the
  program itself) are compiled from an AST with a hook call inserted (`annotated.py`);
* qualified names of functions in code you do not own (`--trace
  pysyncobj.syncobj.SyncObj.__onBecomeLeader=raft-become-leader`): wrapped right after
  their module is imported (`tracing.py`); nothing in site-packages is edited.

Started as

    python -m mallory.pyinstrument --annotated DIR --trace QUALNAME[=LABEL] ... -- prog.py ARGS
    python -m mallory.pyinstrument --annotated DIR --trace-file FILE --catalogue OUT.json

(the second form, without a program, only writes the catalogue that names the events).
Without `MALLORY_SHM` in the environment no hook is installed: the program runs plain.
"""
