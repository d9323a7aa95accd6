"""``rlinks client``: run N copies of a client script as processes, show what they print, summarise each.

The default script is the dummy CartPole client that ships with the package
(:func:`rlinks_rllib.bundled.dummy_client`); ``--script`` runs yours instead.
:data:`CONTRACT` is what a script is given and which of its output is shown,
as ``rlinks client --help`` prints it (``docs/CLIENTS.md`` says it at length).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["ClientProcesses", "print_line", "is_problem", "CLIENT_INDEX_ENV", "SUMMARY_PREFIX", "CONTRACT"]

#: The environment variable that tells each copy its index.
CLIENT_INDEX_ENV = "RLINKS_CLIENT_INDEX"
#: A line that starts with this is the copy's summary.
SUMMARY_PREFIX = "summary:"
_STOP_GRACE_S = 5.0

#: The contract with a client script, for people (``rlinks client --help``).
CONTRACT = f"""\
how each copy runs:
  PYTHON -u SCRIPT --address HOST:PORT [ARGS after --]
  with the Python that runs rlinks, in the current folder, with your
  environment plus {CLIENT_INDEX_ENV}=I (the copy's index, 0 to N-1).

what is shown:
  every line a copy writes, to stdout or stderr, as "[client I] LINE"; with
  --quiet only its summary, its warnings and errors (a traceback whole), and
  its last lines if it fails. A line that starts with "{SUMMARY_PREFIX}" is the
  copy's summary: the last one is kept and always shown.

how it ends:
  when every copy has exited: 0 if all exited 0, else 1. Ctrl-C sends each
  copy SIGTERM, and SIGKILL {_STOP_GRACE_S:g} s later. More in docs/CLIENTS.md.
"""
#: Longest piece of a line read at once: a longer line is shown in pieces of this many characters.
_MAX_LINE_CHARS = 65_536
#: Lines kept per copy, to show when it fails.
_TAIL_LINES = 20
#: A warning or an error: a log record at WARNING or above (the level's name as a word), a Python
#: warning (``file.py:12: UserWarning: ...``), an exception line (``ValueError: ...``) or a traceback's start.
_PROBLEM = re.compile(
    r"\b(WARNING|WARN|ERROR|CRITICAL|FATAL)\b|\b\w*(Warning|Error|Exception)\b:|^Traceback \(most recent call last\)"
)
_stdout_lock = threading.Lock()


def print_line(line: str) -> None:
    """Print ``line`` whole: one write of the line and its newline, flushed.

    Each copy's reader thread prints its lines as they come, and the copies
    of a run often print together; ``print`` writes the text and the
    newline separately, so two such lines (or a line of the learner's live
    view) could run together mid-line.
    """
    with _stdout_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def is_problem(line: str) -> bool:
    """Whether a line a client printed is a warning or an error (shown even when quiet)."""
    return _PROBLEM.search(line) is not None


class ClientProcesses:
    """A group of client processes, their output shown line by line and their last ``summary:`` kept.

    Args:
        script: the client script to run.
        addresses: one address per copy (``HOST:PORT``).
        extra_args: passed to every copy after ``--address``.
        print_fn: gets ``[client i] <line>`` for each line shown (from one
            reader thread per copy; the default prints each line whole).
        quiet: show only each copy's ``summary:`` lines, warnings and errors
            (a traceback whole), and its last lines if it fails.

    Raises:
        FileNotFoundError: ``script`` is not a file.
    """

    def __init__(self, script: Path, addresses: Sequence[str], extra_args: Sequence[str] = (),
                 print_fn: Callable[[str], None] = print_line, quiet: bool = False) -> None:
        if not script.is_file():
            raise FileNotFoundError(f"client script not found: {script} (pass --script PATH)")
        self._print = print_fn
        self.quiet = quiet
        self.summaries: dict[int, str] = {}
        self._tails: dict[int, list[str]] = {}
        self.procs = [
            subprocess.Popen([sys.executable, "-u", str(script), "--address", address, *extra_args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                             env={**os.environ, CLIENT_INDEX_ENV: str(index)},
                             # Its own session: a terminal's Ctrl-C reaches rlinks alone, which then
                             # sends each copy SIGTERM (stop()), the one signal a script is asked to handle.
                             start_new_session=True)
            for index, address in enumerate(addresses)
        ]
        self._readers = [threading.Thread(target=self._read, args=(i, p), daemon=True, name=f"client-{i}-output")
                         for i, p in enumerate(self.procs)]
        for reader in self._readers:
            reader.start()

    def _read(self, index: int, proc: subprocess.Popen) -> None:
        tail = self._tails.setdefault(index, [])
        in_traceback = False
        assert proc.stdout is not None
        while line := proc.stdout.readline(_MAX_LINE_CHARS):
            line = line.rstrip("\r\n")
            summary = line.startswith(SUMMARY_PREFIX)
            if summary:
                self.summaries[index] = line
            if self.quiet:
                # A traceback runs from its first line to the exception's, the first one not indented.
                starts = line.startswith("Traceback (most recent call last)")
                shown = summary or in_traceback or starts or is_problem(line)
                in_traceback = starts or (in_traceback and line[:1].isspace())
            else:
                shown = True
            if shown:
                self._print(f"[client {index}] {line}")
            tail.append(line)
            del tail[:-_TAIL_LINES]

    def wait(self, timeout: float | None = None) -> list[int]:
        """Wait for every copy to exit; return their exit codes.

        A copy that failed without a summary gets a line saying so (quiet:
        with its last lines, which were not shown).

        Raises:
            subprocess.TimeoutExpired: a copy was still running after ``timeout`` seconds.
        """
        codes = [proc.wait(timeout=timeout) for proc in self.procs]
        for reader in self._readers:
            reader.join(timeout=5)
        for index, code in enumerate(codes):
            if code != 0 and index not in self.summaries:
                last = " / ".join(self._tails.get(index, [])[-3:]) if self.quiet else ""
                self._print(f"[client {index}] exited with {code}" + (f": {last}" if last else ""))
        return codes

    def stop(self) -> None:
        """Ask every copy to stop (SIGTERM), then kill what is left."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_GRACE_S)
        for reader in self._readers:
            reader.join(timeout=5)
