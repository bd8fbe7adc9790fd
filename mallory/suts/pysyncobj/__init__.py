"""The pysyncobj KV service (suts/pysyncobj), Python-level instrumentation."""
