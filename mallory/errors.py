"""The one exception type that means "the user gave us something wrong".

Commands raise `MalloryError` for bad input (a malformed batch, a broken spec, a missing
tool); the CLI prints its message on stderr and exits with its `exit_code`, no traceback.
"""


class MalloryError(Exception):
    """A user-facing error: the message says what was wrong and where."""

    #: sysexits' EX_DATAERR: input data was incorrect. 2 is argparse's usage error and,
    #: for `mallory check`, Jepsen's "unknown", so we keep clear of it.
    exit_code: int = 65

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
