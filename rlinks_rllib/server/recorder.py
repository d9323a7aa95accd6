"""Recording what a runner receives as RLlib offline data: Parquet, one row per env step.

The rows are the column form RLlib's own recorder writes
(``OfflineSingleAgentEnvRunner`` with ``output_write_episodes=False``) and
``config.offline_data(input_=DIR)`` reads by default: ``eps_id``, ``obs``,
``actions``, ``rewards``, ``new_obs``, ``terminateds``, ``truncateds``, ``t``
and one column per extra model output (``action_logp``,
``action_dist_inputs``). BC, MARWIL and CQL read such a folder as it is; so do
Ray Data, pandas and any Parquet reader. Episode chunks are written as they
come (a chunk's last row is neither terminated nor truncated when its episode
goes on in the next chunk), so nothing waits for an episode to end.

Every runner writes its own files, named by host, worker index, process id and
a random token, so runners on many hosts can share one folder. A file is
written under a temporary name starting with ``.`` in the same folder, then
closed, fsynced and renamed into place: a crash or ``kill -9`` leaves at most
that temporary file, which Ray Data's reader skips (it ignores names starting
with ``.`` or ``_``). Episodes the runner received but did not hand to RLlib
(``record_untrained``) go to the ``_untrained`` subfolder, which a reader of
the main folder skips for the same reason.

Sizes are bounded: a file is closed once it would pass ``max_file_bytes``
(or after ``max_file_s``), and all of this runner's files together stay
below ``max_total_bytes``: at that cap the recorder either stops (the steps
it can no longer write are counted) or deletes its own oldest files (counted
too); the first time is logged as a warning. Arrays keep their dtype (uint8
images stay uint8) and pages are zstd-compressed. An observation of
:data:`RAW_MIN_BYTES` or more per step (an image) is stored as fixed-size
binary with its dtype and shape in the field's metadata, since Parquet
writes a list column value by value, ten times slower; :func:`read_columns`
and ``training.prelearner.recording_prelearner`` read it back as arrays.

Writing happens on one thread per runner behind a queue bounded in bytes; the
caller (``sample()``) only copies the arrays out of the episodes. When the
queue is full the caller waits for the writer, up to :data:`PUT_TIMEOUT_S`;
past that, or after a write error, steps are dropped, counted and logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

__all__ = ["Recorder", "RecorderStats", "runner_recorder", "episode_columns", "read_columns", "raw_to_array", "UNTRAINED_DIR", "AT_CAP_MODES", "TEMP_PREFIX"]

logger = logging.getLogger("rlinks_rllib.server.recorder")

#: Subfolder of the recording for episodes received but not trained on; the ``_`` keeps readers of the folder out.
UNTRAINED_DIR = "_untrained"
#: What the recorder does at ``max_total_bytes``: stop recording, or delete its own oldest files.
AT_CAP_MODES = ("stop", "rotate")
#: Temporary files start with this, so Ray Data's reader never sees one.
TEMP_PREFIX = "."
SUFFIX = ".parquet"
COMPRESSION = "zstd"
#: Steps whose observation (or other array) takes at least this many bytes are stored raw (see _table).
RAW_MIN_BYTES = 1024
#: Field metadata of a raw column: its numpy dtype (``"|u1"``) and the shape of one step (``"[84, 84, 3]"``).
DTYPE_KEY, SHAPE_KEY = "rlinks.dtype", "rlinks.shape"
#: Rows gather into row groups of about this many bytes (uncompressed), at most a quarter of a file.
ROW_GROUP_BYTES = 16 * 1024 * 1024
#: Room kept for a file's footer when checking the caps: its schema, and an index entry per row group.
FOOTER_BYTES = 8 * 1024
FOOTER_BYTES_PER_GROUP = 2 * 1024
#: Bytes of copied columns the queue to the writer thread holds before the caller waits.
QUEUE_BYTES = 256 * 1024 * 1024
#: Longest a caller waits for room in the queue before dropping (and counting) what it brought.
PUT_TIMEOUT_S = 60.0

#: Column names of RLlib's offline schema (``ray.rllib.core.columns.Columns``).
EPS_ID, OBS, NEW_OBS, ACTIONS, REWARDS, TERMINATEDS, TRUNCATEDS, T = (
    "eps_id", "obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "t")


@dataclasses.dataclass
class RecorderStats:
    """What a recorder did, as counters over its life (``record_*`` in the runner's metrics)."""

    steps: int = 0                #: env steps (rows) written
    untrained_steps: int = 0      #: of those, received but not trained on
    files: int = 0                #: files closed and renamed into place
    bytes: int = 0                #: bytes of this runner's files: those closed, and the open ones so far
    dropped_steps: int = 0        #: steps not written: the total cap ("stop"), a full queue, a write error
    deleted_files: int = 0        #: own oldest files deleted at the total cap ("rotate")
    deleted_bytes: int = 0
    errors: int = 0               #: write errors (the recorder stops after one)

    def as_dict(self) -> dict:
        return {f"record_{k}": v for k, v in dataclasses.asdict(self).items()}


def episode_columns(episodes: Iterable[Any]) -> Optional[dict]:
    """RLlib's offline columns of single-agent episode chunks, one row per env step (copies).

    Returns ``None`` when the chunks hold no step. Extra model outputs become
    columns of their own name; every chunk must have the same ones.
    """
    columns: dict[str, list] = {}
    for episode in episodes:
        n = len(episode)
        if n == 0:
            continue
        obs = np.asarray(episode.get_observations(slice(0, n + 1)))
        last = np.zeros(n, dtype=bool)
        parts = {
            EPS_ID: np.full(n, str(episode.id_), dtype=object),
            OBS: obs[:-1],
            NEW_OBS: obs[1:],
            ACTIONS: np.asarray(episode.get_actions(slice(0, n))),
            REWARDS: np.asarray(episode.get_rewards(slice(0, n)), dtype=np.float32),
            TERMINATEDS: last.copy(),
            TRUNCATEDS: last.copy(),
            T: np.arange(episode.t_started, episode.t_started + n, dtype=np.int64),
        }
        parts[TERMINATEDS][-1] = bool(episode.is_terminated)
        parts[TRUNCATEDS][-1] = bool(episode.is_truncated)
        for key in sorted(episode.extra_model_outputs):
            parts[key] = np.asarray(episode.get_extra_model_outputs(key, slice(0, n)))
        for key, value in parts.items():
            columns.setdefault(key, []).append(value)
    if not columns:
        return None
    return {key: np.concatenate(values) for key, values in columns.items()}


def _table(columns: dict) -> Any:
    """An Arrow table of the columns.

    A value of at least :data:`RAW_MIN_BYTES` per step (an image) becomes
    fixed-size binary: its C-order bytes, with :data:`DTYPE_KEY` and
    :data:`SHAPE_KEY` in the field's metadata (Parquet writes such a column
    about ten times faster than a list column, which it stores value by
    value). A smaller array of more than one dimension becomes Ray Data's
    tensor type, which RLlib's reader turns back into arrays by itself.
    """
    import pyarrow as pa
    from ray.data.extensions import ArrowTensorArray

    fields, arrays = [], []
    for key, value in columns.items():
        metadata = None
        if value.dtype == object:
            array = pa.array(value.tolist(), type=pa.string())
        elif value.ndim > 1 and value[0].nbytes >= RAW_MIN_BYTES:
            value = np.ascontiguousarray(value)
            width = value[0].nbytes
            array = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(value), [None, pa.py_buffer(value)])
            metadata = {DTYPE_KEY: value.dtype.str, SHAPE_KEY: json.dumps(list(value.shape[1:]))}
        elif value.ndim > 1:
            array = ArrowTensorArray.from_numpy(np.ascontiguousarray(value))
        else:
            array = pa.array(value)
        fields.append(pa.field(key, array.type, metadata=metadata))
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def raw_to_array(values: Any, dtype: Any, shape: Iterable[int]) -> np.ndarray:
    """The arrays of a raw column (what :func:`_table` made of an image column): one row per value.

    ``values`` is what a reader gives for the column: a numpy array of
    fixed-width bytes (``S<n>``), an object array or a list of ``bytes``.
    """
    values = np.asarray(values)
    raw = values.tobytes() if values.dtype.kind == "S" else b"".join(values.tolist())
    return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(len(values), *shape)


def read_columns(path: str | os.PathLike) -> dict:
    """A recording file's columns as numpy arrays, raw columns turned back into arrays of their dtype and shape."""
    import pyarrow.parquet as pq
    import ray.data  # noqa: F401 - registers Ray Data's tensor type, so its columns read back as arrays

    table = pq.read_table(path)
    out = {}
    for field, column in zip(table.schema, table.columns):
        metadata = field.metadata or {}
        if DTYPE_KEY.encode() in metadata:
            width = field.type.byte_width
            raw = b"".join(chunk.buffers()[1].to_pybytes()[chunk.offset * width:(chunk.offset + len(chunk)) * width]
                           for chunk in column.chunks)
            shape = json.loads(metadata[SHAPE_KEY.encode()])
            out[field.name] = np.frombuffer(raw, np.dtype(metadata[DTYPE_KEY.encode()].decode())).reshape(-1, *shape)
        else:
            out[field.name] = column.combine_chunks().to_numpy(zero_copy_only=False)
    return out


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Stream:
    """One series of files in one folder: the open temporary file, its next row group, its rotation.

    Rows gather until a row group holds ``group_bytes`` (a file of many tiny
    row groups reads slowly and has a large footer); they are no less safe
    waiting here than in a file whose footer is not written yet. Not thread-safe.
    """

    def __init__(self, directory: Path, prefix: str, group_bytes: int) -> None:
        self.directory = directory
        self.prefix = prefix
        self.group_bytes = group_bytes
        self._seq = 0
        self._writer: Any = None
        self._schema: Any = None
        self._temp: Optional[Path] = None
        self._final: Optional[Path] = None
        self._pending: list = []
        self._pending_bytes = 0
        self._written = 0
        self._groups = 0
        self.opened_at = 0.0

    @property
    def is_open(self) -> bool:
        return self._schema is not None

    @property
    def size(self) -> int:
        """Bytes this file has, or will have once its gathered rows are written (uncompressed: at most)."""
        return self._written + self._pending_bytes

    @property
    def footer_bytes(self) -> int:
        """Room to keep for the footer of the open file (or of a new one): the schema and a row-group index."""
        return FOOTER_BYTES + FOOTER_BYTES_PER_GROUP * (self._groups + 2)

    def fits(self, table: Any) -> bool:
        """Whether ``table`` can go to the open file (no file is open, or it has the same schema)."""
        return self._schema is None or table.schema.equals(self._schema, check_metadata=False)

    def add(self, table: Any) -> None:
        """Add rows to the open file (opening one if none is); the caller checked :meth:`fits`.

        Raises:
            OSError: the file can't be written.
        """
        import pyarrow.parquet as pq

        if self._writer is None:
            self._seq += 1
            name = f"{self.prefix}-{self._seq:06d}{SUFFIX}"
            self._final = self.directory / name
            self._temp = self.directory / f"{TEMP_PREFIX}{name}.tmp"
            # Raw image columns get neither a dictionary nor min/max statistics: both cost time and buy nothing.
            plain = [f.name for f in table.schema if not (f.metadata and DTYPE_KEY.encode() in f.metadata)]
            self._writer = pq.ParquetWriter(str(self._temp), table.schema, compression=COMPRESSION,
                                            use_dictionary=plain, write_statistics=plain)
            self._schema = table.schema
            self.opened_at = time.monotonic()
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= self.group_bytes:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._pending:
            return
        table = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_bytes = [], 0
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._groups += 1
        self._written = self._temp.stat().st_size

    def close(self) -> Optional[tuple[Path, int]]:
        """Finish the open file, fsync it and rename it into place; its ``(path, size)``, or None if none was open.

        Raises:
            OSError: the file can't be finished.
        """
        if self._writer is None:
            return None
        try:
            self._flush()
            self._writer.close()
        finally:
            temp, final = self._temp, self._final
            self._writer = self._temp = self._final = self._schema = None
            self._pending, self._pending_bytes, self._written, self._groups = [], 0, 0, 0
        _fsync_path(temp)
        os.replace(temp, final)
        _fsync_path(final.parent, directory=True)
        return final, final.stat().st_size


def file_prefix(worker_index: int) -> str:
    """A name no other runner's files have: host, worker index, process id, start time and a random token."""
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname()) or "host"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"rlinks-{host}-w{worker_index:03d}-p{os.getpid()}-{stamp}-{uuid.uuid4().hex[:8]}"


class Recorder:
    """Writes a runner's episode chunks to Parquet files in ``directory``, bounded in size.

    Args:
        directory: the recording folder (created if missing); untrained
            episodes go to its ``_untrained`` subfolder.
        max_file_bytes: a file is closed before a row group would take it past this.
        max_total_bytes: this recorder's files together stay below this.
        at_cap: ``"stop"``: stop writing at ``max_total_bytes`` (counting what
            is not written); ``"rotate"``: delete this recorder's oldest files.
        max_file_s: a file open this long is closed (bounds what a crash loses).
        prefix: the start of every file name (default :func:`file_prefix` of worker 0).
        threaded: write on a thread of its own (``False``: in :meth:`add`, for comparison).
        queue_bytes: bytes waiting for the writer thread before :meth:`add` waits.

    Raises:
        OSError: the folder can't be created or written.
        ValueError: a bound is not positive or ``at_cap`` unknown.
    """

    def __init__(self, directory: str | os.PathLike, *, max_file_bytes: int, max_total_bytes: int,
                 at_cap: str = "stop", max_file_s: float = 300.0, prefix: Optional[str] = None,
                 threaded: bool = True, queue_bytes: int = QUEUE_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if at_cap not in AT_CAP_MODES:
            raise ValueError(f"at_cap must be one of {AT_CAP_MODES}, got {at_cap!r}")
        if min(max_file_bytes, max_total_bytes, queue_bytes) <= 0 or max_file_s <= 0:
            raise ValueError("recorder bounds must be positive")
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        if not os.access(self.directory, os.W_OK):
            raise PermissionError(f"recording folder {self.directory} is not writable")
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.at_cap = at_cap
        self.max_file_s = max_file_s
        self._clock = clock
        prefix = prefix or file_prefix(0)
        group_bytes = max(1, min(ROW_GROUP_BYTES, max_file_bytes // 4))
        self._streams = {True: _Stream(self.directory, prefix, group_bytes),
                         False: _Stream(self.directory / UNTRAINED_DIR, prefix, group_bytes)}
        #: Closed files of this recorder, oldest first, with their sizes (what "rotate" deletes).
        self._closed: deque[tuple[Path, int]] = deque()
        self._closed_bytes = 0
        self._stats = RecorderStats()
        self._stats_lock = threading.Lock()
        self._capped = False
        self._failed = False
        self._warned_cap = False
        # The queue to the writer thread: (trained, columns, nbytes) items, bounded by bytes.
        self._queue: deque[tuple[bool, dict, int]] = deque()
        self._queued_bytes = 0
        self._queue_bytes = queue_bytes
        self._cond = threading.Condition()
        self._closing = False
        self._thread: Optional[threading.Thread] = None
        leftovers = [p.name for p in self.directory.glob(f"{TEMP_PREFIX}*{SUFFIX}.tmp")]
        if leftovers:
            logger.warning("recording folder %s holds %d unfinished file(s) of a process that ended before closing "
                           "them (%s...); readers skip them, and they can be deleted", self.directory,
                           len(leftovers), leftovers[0])
        if threaded:
            self._thread = threading.Thread(target=self._run, name="rlinks-recorder", daemon=True)
            self._thread.start()

    # -- the caller's side (RLlib's sample() thread) ------------------------------------------

    def add(self, episodes: list, *, trained: bool = True) -> None:
        """Record ``episodes`` (single-agent chunks): copy their columns now, write them soon.

        Never raises for the disk: a failure is logged and counted, and later
        calls only count what they bring.
        """
        groups: dict[tuple, list] = {}
        for episode in episodes:
            # Chunks with other extra model outputs make other columns: one table per kind.
            groups.setdefault(tuple(sorted(episode.extra_model_outputs)), []).append(episode)
        for group in groups.values():
            columns = episode_columns(group)
            if columns is not None:
                self._add_columns(trained, columns)

    def _add_columns(self, trained: bool, columns: dict) -> None:
        steps = len(columns[OBS])
        if self._failed or self._capped:
            self._count(dropped_steps=steps)
            return
        nbytes = sum(value.nbytes for value in columns.values())
        if self._thread is None:
            self._write(trained, columns)
            self._close_old_files()
            return
        with self._cond:
            deadline = self._clock() + PUT_TIMEOUT_S
            while self._queued_bytes and self._queued_bytes + nbytes > self._queue_bytes and not self._closing:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._closing or (self._queued_bytes and self._queued_bytes + nbytes > self._queue_bytes):
                full = not self._closing
            else:
                self._queue.append((trained, columns, nbytes))
                self._queued_bytes += nbytes
                self._cond.notify_all()
                return
        self._count(dropped_steps=steps)
        logger.error("recorder: %d env steps not recorded: %s", steps,
                     f"the writer did not keep up for {PUT_TIMEOUT_S:.0f} s" if full else "the recorder is closed")

    def stats(self) -> dict:
        """The counters now (``record_steps``, ``record_files``, ...)."""
        with self._stats_lock:
            return self._stats.as_dict()

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, finish the open files; returns within about ``timeout`` seconds."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.error("recorder: the writer did not finish within %.0f s; its open files stay unfinished "
                             "(readers skip them)", timeout)
                return
        else:
            self._finish_all()

    # -- the writer's side ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    due = self._due_s()
                    if due is not None and due <= 0:
                        break
                    self._cond.wait(due)  # None: until add() or close() notifies
                item = self._queue.popleft() if self._queue else None
                if item is not None:
                    self._queued_bytes -= item[2]
                    self._cond.notify_all()
                elif self._closing:
                    break
            if item is not None:
                self._write(item[0], item[1])
            self._close_old_files()
        self._finish_all()

    def _due_s(self) -> Optional[float]:
        """Seconds until the oldest open file is due to be closed; None when none is open."""
        opened = [s.opened_at for s in self._streams.values() if s.is_open]
        return None if not opened else min(opened) + self.max_file_s - self._clock()

    def _close_old_files(self) -> None:
        for stream in self._streams.values():
            if stream.is_open and self._clock() - stream.opened_at >= self.max_file_s:
                self._guarded(self._close_stream, stream)

    def _finish_all(self) -> None:
        for stream in self._streams.values():
            self._guarded(self._close_stream, stream)

    def _guarded(self, action: Callable, *args: Any) -> bool:
        """Run a disk action; on OSError log it, count it and stop recording. Returns whether it worked."""
        if self._failed:
            return False
        try:
            action(*args)
            return True
        except OSError as exc:
            self._failed = True
            self._count(errors=1)
            logger.error("recorder: writing to %s failed (%s); recording stops, later steps are counted as "
                         "record_dropped_steps", self.directory, exc)
            return False

    def _write(self, trained: bool, columns: dict) -> None:
        steps = len(columns[OBS])
        if self._failed or self._capped:
            self._count(dropped_steps=steps)
            return
        stream = self._streams[trained]
        if not stream.directory.exists() and not self._guarded(stream.directory.mkdir, 0o777, True, True):
            self._count(dropped_steps=steps)
            return
        table = _table(columns)
        # Pieces of at most a row group: the caps are checked piece by piece.
        rows_per_piece = max(1, stream.group_bytes // max(1, table.nbytes // max(1, table.num_rows)))
        start = 0
        while start < steps:
            piece = table.slice(start, rows_per_piece)
            if stream.is_open and (not stream.fits(piece)
                                   or stream.size + piece.nbytes + stream.footer_bytes > self.max_file_bytes):
                if not self._guarded(self._close_stream, stream):
                    break
            if not self._room_for(piece.nbytes, stream):
                break
            if not self._guarded(stream.add, piece):
                break
            start += piece.num_rows
            self._count(steps=piece.num_rows, untrained_steps=0 if trained else piece.num_rows)
        if start < steps:
            self._count(dropped_steps=steps - start)
        self._set_bytes()

    def _room_for(self, nbytes: int, stream: _Stream) -> bool:
        """Whether ``nbytes`` more for ``stream`` fit under the total cap (after deleting old files when rotating).

        Counts every file closed, what the open ones hold, and room for the footers they will have.
        """
        def total() -> int:
            open_files = sum(s.size + s.footer_bytes for s in self._streams.values() if s.is_open)
            return self._closed_bytes + open_files + nbytes + (0 if stream.is_open else stream.footer_bytes)

        while total() > self.max_total_bytes:
            if self.at_cap == "rotate" and not self._closed and stream.is_open:
                if not self._guarded(self._close_stream, stream):
                    return False
                continue
            if self.at_cap == "stop" or not self._closed:
                self._capped = True
                self._warn_cap("stops recording; later steps are counted as record_dropped_steps")
                self._finish_all()
                return False
            path, size = self._closed.popleft()
            self._closed_bytes -= size
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # someone else removed it: its bytes are gone all the same
            except OSError as exc:
                logger.warning("recorder: could not delete %s at the total cap: %s", path, exc)
                self._count(errors=1)
                continue
            self._count(deleted_files=1, deleted_bytes=size)
            self._warn_cap("deletes its oldest files (counted as record_deleted_files)")
            logger.info("recorder: deleted %s (%d bytes) to stay under the total cap", path.name, size)
        return True

    def _warn_cap(self, what: str) -> None:
        if not self._warned_cap:
            self._warned_cap = True
            logger.warning("recorder: this runner's recording in %s reached record_max_total_mb (%.1f MB) and %s",
                           self.directory, self.max_total_bytes / 1e6, what)

    def _close_stream(self, stream: _Stream) -> None:
        closed = stream.close()
        if closed is not None:
            self._closed.append(closed)
            self._closed_bytes += closed[1]
            self._count(files=1)
        self._set_bytes()

    def _set_bytes(self) -> None:
        with self._stats_lock:
            self._stats.bytes = self._closed_bytes + sum(s.size for s in self._streams.values())

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self._stats, name, getattr(self._stats, name) + delta)


def runner_recorder(settings: Any, worker_index: int, *, multi_agent: bool, observation_space: Any) -> Optional[Recorder]:
    """The recorder a runner with these settings keeps; None when ``record_dir`` is unset or it can't record.

    RLlib's offline reader reads single-agent data with an array
    observation; a multi-agent runner, or one whose observations are a
    Dict or Tuple, says so in the log and records nothing.

    Raises:
        OSError: ``record_dir`` can't be created or written (the runner fails to start, as for a taken port).
    """
    import gymnasium as gym

    if not settings.record_dir:
        return None
    if multi_agent or not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Discrete)):
        logger.warning("RLinkEnvRunner %d records nothing to %s: RLlib's offline data holds single-agent episodes "
                       "with an array observation (this runner is %s)", worker_index, settings.record_dir,
                       "multi-agent" if multi_agent else f"observed through {type(observation_space).__name__}")
        return None
    recorder = Recorder(settings.record_dir, max_file_bytes=int(settings.record_max_file_mb * 1e6),
                        max_total_bytes=int(settings.record_max_total_mb * 1e6), at_cap=settings.record_at_cap,
                        max_file_s=settings.record_max_file_s, prefix=file_prefix(worker_index))
    logger.info("RLinkEnvRunner %d records to %s (files of up to %g MB, %g MB in all, then %s)", worker_index,
                recorder.directory, settings.record_max_file_mb, settings.record_max_total_mb, settings.record_at_cap)
    return recorder
