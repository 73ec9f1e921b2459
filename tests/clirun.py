"""The command line, run inside the test process.

`python -m engine ARGS` is `sys.exit(planner.cli.main(ARGS))` and nothing else (engine/__main__.py),
so calling `main` here with stdout and stderr captured gives the same exit code and the same text
as a child process, without starting an interpreter and importing pandas, DuckDB and the catalog
for every call (about 1.5 s of CPU each on the 2-core CI machine). What only a real process shows
(the entry point itself, a reader that closes the pipe, environment variables read at import) is
still checked through subprocesses: `test_the_entry_point_is_main` in tests/test_cli.py compares
the two ways on a few commands, and the tests that need a process keep one.
"""

from __future__ import annotations

import contextlib
import io
import warnings

from planner import cli


def run_cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python -m engine *args`, run in this process."""
    out, err = io.StringIO(), io.StringIO()

    def show(message, category, filename, lineno, file=None, line=None):
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        # a fresh interpreter's filters, each warning once per call (changing the filters resets
        # the once-per-place registries), printed to this call's stderr as the CLI formats it
        warnings.resetwarnings()
        for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", quiet)  # as Python's default filters
        warnings.showwarning = show
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as exc:  # argparse's own exits (--help, a bad choice)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()
