"""Reading processes: they read line files into chunks (:func:`~obsmem.transcripts.reading.read_chunks`)
while the importing process stores the chunks before them.

Reading, parsing, validating and redacting a transcript costs about twice what storing it does, and both
are CPU-bound Python, so a thread would wait on the GIL: processes use the other cores. One fresh
interpreter is started with ``python -P -c`` calling :func:`main` (it imports only the readers, never
the caller's main module, and is never a fork of a process whose threads may hold locks); once the
readers are imported it forks the other reading processes from itself, before any thread starts, so
the imports are paid once. Each reading process talks over its own pair of pipes in frames (an 8-byte
length, then a pickle):

- in: :class:`~obsmem.transcripts.reading.LineJob` frames, read by a thread so that the importer never
  waits to hand over the next file;
- out: the :class:`~obsmem.transcripts.reading.Chunk` frames of each job in order, the last one ``final``;
  a job that fails in a way an in-process read would not (a bug) ends with a :class:`Crashed` frame.

Memory is bounded: the importer hands each process at most four files at once, a process keeps at most
:data:`AHEAD` pickled chunks waiting to be written, and a full pipe stops it until the importer reads.
Their standard error goes nowhere: a traceback could quote transcript text.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from obsmem.transcripts.reading import Chunk, LineJob, read_chunks

_ENTRY = "from obsmem.transcripts.reading_process import main; raise SystemExit(main())"
AHEAD = 4  # chunks the process may have prepared beyond the one the importer is storing
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


class Reader:
    """The importer's end of one reading process: hand it jobs, take their chunks in order."""

    def __init__(self, jobs: IO[bytes], chunks: IO[bytes]) -> None:
        self.jobs = jobs
        self.chunk_stream = chunks

    def submit(self, job: LineJob) -> None:
        try:
            _write_frame(self.jobs, pickle.dumps(job, pickle.HIGHEST_PROTOCOL))
        except OSError as exc:
            raise ReadingFailed("the reading process is gone") from exc

    def chunks(self) -> Iterator[Chunk]:
        """The chunks of the oldest job not read yet, up to its final chunk."""
        while True:
            payload = _read_frame(self.chunk_stream)
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

    def close(self) -> None:
        for stream in (self.jobs, self.chunk_stream):
            with contextlib.suppress(OSError):
                stream.close()


class ReadingProcesses:
    """``count`` reading processes: one interpreter is started, imports the readers once, and forks the
    others from itself before it starts any thread (so no lock can be held across the fork). Each has
    its own pair of pipes; they form a process group of their own, so they can be ended together."""

    def __init__(self, count: int) -> None:
        child_fds: list[int] = []
        ours: list[tuple[int, int]] = []
        arguments: list[str] = []
        try:
            for _ in range(count):
                jobs_in, jobs_out = os.pipe()
                chunks_in, chunks_out = os.pipe()
                child_fds += [jobs_in, chunks_out]
                ours.append((jobs_out, chunks_in))
                arguments.append(f"{jobs_in},{chunks_out}")
            self.process = subprocess.Popen(
                # -P: never import from the current directory; -c rather than -m: the package imports
                # this module before -m would run it.
                [sys.executable, "-P", "-c", _ENTRY, *arguments],
                pass_fds=child_fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            for jobs_out, chunks_in in ours:
                os.close(jobs_out)
                os.close(chunks_in)
            raise
        finally:
            for fd in child_fds:
                os.close(fd)
        self.readers = [Reader(open(jobs, "wb"), open(chunks, "rb")) for jobs, chunks in ours]  # noqa: SIM115

    def close(self, *, abandon: bool = False) -> None:
        """End the processes: at the end of their input they exit; ones that do not, or whose output is
        abandoned (one failed, or the import stopped early), are killed."""
        if abandon:
            self._kill()
        for reader in self.readers:
            reader.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill()
            self.process.wait()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _take_jobs(stream: IO[bytes], jobs: queue.Queue[LineJob | None]) -> None:
    """Read job frames as they come, so the importer's writes never wait on this process's work."""
    while (payload := _read_frame(stream)) is not None:
        jobs.put(pickle.loads(payload))
    jobs.put(None)


def _send_frames(stream: IO[bytes], frames: queue.Queue[bytes | None]) -> None:
    try:
        while (payload := frames.get()) is not None:
            _write_frame(stream, payload)
    except OSError:  # the importer is gone: nobody will read what this process prepares
        os._exit(0)


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
    """Serve the pipe pairs named on the command line (``jobs,chunks`` file descriptors), the first in
    this process and each other in a process forked from it (see :class:`ReadingProcesses`)."""
    pairs = [tuple(int(fd) for fd in argument.split(",")) for argument in sys.argv[1:]]
    forks: list[int] = []
    for index in range(1, len(pairs)):
        pid = os.fork()
        if pid == 0:
            _serve_pair(pairs, index)
            os._exit(0)
        forks.append(pid)
    _serve_pair(pairs, 0)
    for pid in forks:  # so their CPU time is counted with this process's, by whoever waits for it
        os.waitpid(pid, 0)
    return 0


def _serve_pair(pairs: list[tuple[int, ...]], index: int) -> None:
    for other, fds in enumerate(pairs):
        if other != index:
            for fd in fds:
                os.close(fd)  # or the importer would never see the end of the other process's output
    jobs, chunks = pairs[index]
    # An OSError: the importer went away, nothing left to do.
    with open(jobs, "rb") as job_stream, open(chunks, "wb") as chunk_stream, contextlib.suppress(OSError):
        _serve(job_stream, chunk_stream)


if __name__ == "__main__":
    sys.exit(main())
