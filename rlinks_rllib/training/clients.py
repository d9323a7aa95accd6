"""``rlinks client``: run N copies of a client script as processes, and summarise each.

The default script is the dummy CartPole client that ships with the package
(:func:`rlinks_rllib.bundled.dummy_client`); point ``--script`` at your own
copy to run that instead. Each copy gets
``--address HOST:PORT`` and whatever extra arguments follow ``--``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["ClientProcesses", "print_line"]

_STOP_GRACE_S = 5.0
_stdout_lock = threading.Lock()


def print_line(line: str) -> None:
    """Print ``line`` whole: one write of the line and its newline, flushed.

    Each copy's reader thread prints its summary when that copy ends, and the
    copies of a run often end together; ``print`` writes the text and the
    newline separately, so two such lines (or a line of the learner's live
    view) could run together mid-line.
    """
    with _stdout_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class ClientProcesses:
    """A group of client processes whose last ``summary:`` line is kept per copy.

    Args:
        script: the client script to run.
        addresses: one address per copy (``HOST:PORT``).
        extra_args: passed to every copy after ``--address``.
        print_fn: gets ``[client i] <line>`` for each copy's summary and failures
            (from one reader thread per copy; the default prints each line whole).
    """

    def __init__(self, script: Path, addresses: Sequence[str], extra_args: Sequence[str] = (),
                 print_fn: Callable[[str], None] = print_line) -> None:
        if not script.is_file():
            raise FileNotFoundError(f"client script not found: {script} (pass --script PATH)")
        self._print = print_fn
        self.summaries: dict[int, str] = {}
        self._tails: dict[int, list[str]] = {}
        self.procs = [
            subprocess.Popen([sys.executable, "-u", str(script), "--address", address, *extra_args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for address in addresses
        ]
        self._readers = [threading.Thread(target=self._read, args=(i, p), daemon=True)
                         for i, p in enumerate(self.procs)]
        for reader in self._readers:
            reader.start()

    def _read(self, index: int, proc: subprocess.Popen) -> None:
        tail = self._tails.setdefault(index, [])
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if line.startswith("summary:"):
                self.summaries[index] = line
                self._print(f"[client {index}] {line}")
            tail.append(line)
            del tail[:-20]

    def wait(self, timeout: float | None = None) -> list[int]:
        """Wait for every copy to exit; return their exit codes."""
        codes = [proc.wait(timeout=timeout) for proc in self.procs]
        for reader in self._readers:
            reader.join(timeout=5)
        for index, code in enumerate(codes):
            if code != 0 and index not in self.summaries:
                last = " / ".join(self._tails.get(index, [])[-3:])
                self._print(f"[client {index}] exited with {code}: {last}")
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
