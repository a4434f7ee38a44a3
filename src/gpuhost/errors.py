"""Exit codes and the one exception type the CLI turns into a message instead of a traceback."""

# DeepOps-doctor style: 0 all good, 1 a host or check failed, 2 the run could not start
# (usage or environment). 130 is the shell's convention for "stopped by Ctrl-C".
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class GpuhostError(Exception):
    """A problem the user can fix (bad path, missing tool); printed as one message."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
