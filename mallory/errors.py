"""The one exception type that means "the user gave us something wrong", and the exit codes
every Mallory entry point uses.

Commands raise `MalloryError` for bad input (a malformed batch, a broken spec, a missing
tool); the CLI (mallory/cli.py, which maps every outcome to its code) prints its message on
stderr and exits `ExitCode.BAD_INPUT`, no traceback.
"""

from enum import IntEnum


class ExitCode(IntEnum):
    """What a Mallory command's exit status means (Jepsen's CLI for 0, 1, 2, 254 and 255,
    which CI scripts rely on). A command's `run` returns OK, FAILED or UNKNOWN; the CLI
    gives the others."""

    #: done: valid history, campaign without bugs, the bug came back
    OK = 0
    #: the negative answer, as each command defines it: invalid history, bug found, the
    #: bug did not come back
    FAILED = 1
    #: `mallory check` could not decide (its search budget ran out)
    UNKNOWN = 2
    #: `mallory fuzz`: a part of the campaign's machinery died (the mediator); sysexits'
    #: EX_UNAVAILABLE. `--resume` continues from the last whole schedule
    UNAVAILABLE = 69
    #: Ctrl-C
    INTERRUPTED = 130
    #: bad arguments or input: a usage error, or a MalloryError (its message says what)
    BAD_INPUT = 254
    #: an internal error: an uncaught exception, a bug in Mallory (its traceback is printed)
    INTERNAL_ERROR = 255


class MalloryError(Exception):
    """A user-facing error: the message says what was wrong and where. The command exits
    with the class's `exit_code`."""

    exit_code: ExitCode = ExitCode.BAD_INPUT
