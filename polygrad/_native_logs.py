"""Keep TensorFlow's native (C++) log lines off stderr in polygrad's own entry points.

TensorFlow and XLA log from C++ through absl. ``TF_CPP_MIN_LOG_LEVEL`` silences
what they log after absl is initialised (the ``cuInit`` errors, for example),
but not the lines written while the shared libraries load ("oneDNN custom
operations are on", "Could not find cuda drivers", "All log messages before
absl::InitializeLog() ..."): those go to file descriptor 2 whatever the
environment says. The command line and the demo therefore run inside
:func:`quiet_native_logs`, which

* sets ``TF_CPP_MIN_LOG_LEVEL=3`` unless the user set it (only the log level:
  ``TF_ENABLE_ONEDNN_OPTS`` would change TensorFlow's numerics);
* points file descriptor 2 at a temporary file while Python's own
  ``sys.stderr`` keeps writing to the terminal (progress bars, warnings and
  tracebacks appear as before, in real time);
* on exit, restores both and writes back every captured line that is not a
  native log line, so nothing else a library writes there is lost.

``import polygrad`` and library calls never enter it: the environment and the
file descriptors of a program that uses polygrad are left alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["is_native_log_line", "quiet_native_logs", "strip_native_logs"]

# absl/glog prefix: severity, MMDD, time, thread id, file:line]
# (before absl is initialised the time reads "00:00:<seconds since 1970>")
_RECORD = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./+-]+:\d+\] ")
_BANNERS = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    # the second line of cpu_feature_guard's message
    re.compile(r"^To enable the following instructions: .* rebuild TensorFlow"),
)
_ACTIVE: list[bool] = []


def is_native_log_line(line: str) -> bool:
    """Whether ``line`` was written by absl/glog logging in native code.

    Parameters
    ----------
    line : str
        One line of stderr output, with or without its newline.

    Returns
    -------
    bool
        True for an absl/glog record (``I0000 00:00:17.5  123 port.cc:153] ...``)
        or one of TensorFlow's known banner lines.
    """
    return bool(_RECORD.match(line)) or any(b.match(line) for b in _BANNERS)


def strip_native_logs(text: str) -> str:
    """``text`` without its native log lines (see :func:`is_native_log_line`)."""
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not is_native_log_line(line))


@contextlib.contextmanager
def _env_default(name: str, value: str) -> Iterator[None]:
    """Set environment variable ``name`` to ``value`` unless set; undo on exit."""
    had = name in os.environ
    os.environ.setdefault(name, value)
    try:
        yield
    finally:
        if not had:
            os.environ.pop(name, None)


@contextlib.contextmanager
def _python_stderr_on(fd: int) -> Iterator[None]:
    """Make ``sys.stderr`` write to a duplicate of ``fd`` if it writes to fd 2."""
    if _stderr_fd() != 2:
        yield
        return
    real_stream = sys.stderr
    raw = os.fdopen(os.dup(fd), "wb", buffering=0)
    sys.stderr = io.TextIOWrapper(raw, write_through=True, errors="backslashreplace")
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = real_stream


@contextlib.contextmanager
def _native_stderr_captured() -> Iterator[None]:
    """Point fd 2 at a temporary file; Python's ``sys.stderr`` keeps the real target."""
    sys.stderr.flush()
    real_fd = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            with _python_stderr_on(real_fd):
                yield
        finally:
            os.dup2(real_fd, 2)
            os.close(real_fd)
            sink.seek(0)
            kept = strip_native_logs(sink.read().decode(errors="replace"))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _stderr_fd() -> int | None:
    """The file descriptor of ``sys.stderr``, or None where it has none."""
    try:
        return int(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def quiet_native_logs() -> Iterator[None]:
    """Run the block with TensorFlow's native log lines kept off stderr.

    Re-entrant (an inner use does nothing). Where ``sys.stderr`` has no file
    descriptor (a notebook, a captured stream), only the log level is set. A
    user who sets ``TF_CPP_MIN_LOG_LEVEL=0`` asks for every line and gets it.

    Yields
    ------
    None
    """
    if _ACTIVE or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        yield
        return
    _ACTIVE.append(True)
    try:
        with _env_default("TF_CPP_MIN_LOG_LEVEL", "3"):
            if _stderr_fd() is not None and _fd_open(2):
                with _native_stderr_captured():
                    yield
            else:
                yield
    finally:
        _ACTIVE.pop()
