"""One-line errors for the snippet commands: a problem, its fix, exit code 2."""
import argparse
import sys


class UsageError(Exception):
    """A problem the user can fix; str() is one line naming the problem and the fix."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}. Fix: {fix}")


def run(main, argv=None) -> int:
    """Call main(argv); turn UsageError and any other failure into one line on stderr."""
    try:
        return main(sys.argv[1:] if argv is None else argv) or 0
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # never a bare traceback for a reader
        print(f"error: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return 1


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with its usage errors as one line and exit code 2."""

    def error(self, message):
        self.exit(2, f"error: {message}. Fix: see '{self.prog} --help'\n")
