"""A second process that reads line files into chunks (:func:`~obsmem.transcripts.reading.read_chunks`)
while the importing process writes the chunks before them.

Reading, parsing, validating and redacting a transcript costs about twice what storing it does, and both
are CPU-bound Python, so a thread would wait on the GIL: a process uses the second core. It is started
with ``python -P -c`` calling :func:`main` (a fresh interpreter that imports only the readers,
never the caller's main module and never a fork of a process whose threads may hold locks), and talks
over its standard streams in frames (an 8-byte length, then a pickle):

- in: :class:`~obsmem.transcripts.reading.LineJob` frames, read by a thread so that the importer never
  waits to hand over the next file;
- out: the :class:`~obsmem.transcripts.reading.Chunk` frames of each job in order, the last one ``final``;
  a job that fails in a way an in-process read would not (a bug) ends with a :class:`Crashed` frame.

Memory is bounded: the importer keeps at most two jobs outstanding, the process keeps at most
:data:`AHEAD` pickled chunks waiting to be written, and a full pipe stops it until the importer reads.
Its standard error goes nowhere: a traceback could quote transcript text.
"""

from __future__ import annotations

import contextlib
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from obsmem.transcripts.reading import Chunk, LineJob, read_chunks

_ENTRY = "from obsmem.transcripts.reading_process import main; raise SystemExit(main())"
AHEAD = 2  # chunks the process may have prepared beyond the one the importer is storing
_LENGTH = 8


@dataclass(frozen=True)
class Crashed:
    """A job the reading process could not finish: the importer reads the file in-process instead."""

    error: str  # the exception's type name (never its message, which could quote transcript text)


class ReadingFailed(Exception):
    """The reading process crashed, exited or sent something unreadable."""


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(len(payload).to_bytes(_LENGTH, "big"))
    stream.write(payload)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or None at the end of the stream (a frame cut short counts as the end)."""
    header = stream.read(_LENGTH)
    if len(header) < _LENGTH:
        return None
    size = int.from_bytes(header, "big")
    payload = stream.read(size)
    return payload if len(payload) == size else None


class ReadingProcess:
    """The importer's end: start the process, hand it jobs, take their chunks in order, close it."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            # -P: never import from the current directory; -c rather than -m: the package imports this
            # module before -m would run it.
            [sys.executable, "-P", "-c", _ENTRY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def submit(self, job: LineJob) -> None:
        assert self.process.stdin is not None
        try:
            _write_frame(self.process.stdin, pickle.dumps(job, pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError) as exc:
            raise ReadingFailed("the reading process is gone") from exc

    def chunks(self) -> Iterator[Chunk]:
        """The chunks of the oldest job not read yet, up to its final chunk."""
        assert self.process.stdout is not None
        while True:
            payload = _read_frame(self.process.stdout)
            if payload is None:
                raise ReadingFailed("the reading process exited")
            try:
                item = pickle.loads(payload)
            except Exception as exc:  # noqa: BLE001 - any unpickling failure means the stream is unusable
                raise ReadingFailed("the reading process sent an unreadable frame") from exc
            if isinstance(item, Crashed):
                raise ReadingFailed(f"the reading process failed ({item.error})")
            if not isinstance(item, Chunk):
                raise ReadingFailed("the reading process sent something other than a chunk")
            yield item
            if item.final:
                return

    def close(self, *, abandon: bool = False) -> None:
        """End the process: at the end of its input it exits; one that does not, or one whose output is
        abandoned (it failed, or the import stopped early), is killed."""
        if abandon:
            self.process.kill()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _take_jobs(stream: IO[bytes], jobs: queue.Queue[LineJob | None]) -> None:
    """Read job frames as they come, so the importer's writes never wait on this process's work."""
    while (payload := _read_frame(stream)) is not None:
        jobs.put(pickle.loads(payload))
    jobs.put(None)


def _send_frames(stream: IO[bytes], frames: queue.Queue[bytes | None]) -> None:
    while (payload := frames.get()) is not None:
        _write_frame(stream, payload)


def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    jobs: queue.Queue[LineJob | None] = queue.Queue()
    frames: queue.Queue[bytes | None] = queue.Queue(maxsize=AHEAD)
    threading.Thread(target=_take_jobs, args=(stdin, jobs), daemon=True).start()
    sender = threading.Thread(target=_send_frames, args=(stdout, frames), daemon=True)
    sender.start()
    while (job := jobs.get()) is not None:
        try:
            for chunk in read_chunks(job):
                frames.put(_dump(chunk))
        except Exception as exc:  # noqa: BLE001 - a bug in a reader: the importer redoes the file in-process
            frames.put(pickle.dumps(Crashed(type(exc).__name__)))
    frames.put(None)
    sender.join()


def _dump(chunk: Chunk) -> bytes:
    try:
        return pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - an error object that does not pickle
        return pickle.dumps(Crashed(type(exc).__name__))


def main() -> int:
    with contextlib.suppress(BrokenPipeError):  # the importer went away: nothing left to do
        _serve(sys.stdin.buffer, sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
