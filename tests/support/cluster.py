"""Several ``obsmem serve`` and ``obsmem worker`` processes on one PostgreSQL database, and a chaos run over them.

:class:`Cluster` starts real subprocesses on 127.0.0.1 (servers on fixed ports, so a restarted server is
found where it was), all reading one settings file whose models are the scripted chat server of the caller.
:func:`run_chaos` drives it: clients spread over the servers append events (each batch retried, on another
server, until one acknowledges it) and search for what was acknowledged; a follower on every server reads
the event stream (SSE), reconnecting with ``Last-Event-ID`` whenever its server goes away; a killer sends
SIGKILL to a random server or worker once per round, at a random moment, and restarts it. Afterwards it
checks the database (:func:`check_cluster`) and returns the figures as a dict (the benchmark prints them as
JSON). Every loop and wait is bounded; only the processes started here are ever killed.

Used by ``tests/test_postgres_chaos.py`` (a few rounds) and ``benchmarks/postgres_chaos.py`` (the long run).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from obsmem.app import Obsmem
from obsmem.settings import load_settings

PROJECT = "chaos"
START_SECONDS = 60.0
STOP_SECONDS = 15.0

SETTINGS_TOML = """
[storage]
backend = "postgres"
dsn = "{dsn}"
pool_size = 4

[model]
base_url = "{chat_url}"
model_id = "scripted"
timeout_seconds = 10
max_retries = 0
retry_backoff_seconds = 0.01

[observer]
buffer_tokens = 150

[reflector]
reflect_after_observation_tokens = 250
resume_after_failure_seconds = 0

[pools]
observations_max_tokens = 120

[jobs]
in_server = true
lease_seconds = {lease}
retry_backoff_seconds = 0.05
max_retries = 8
poll_seconds = 0.05
housekeeping_seconds = 0.5
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    """One ``obsmem serve`` (with a port) or ``obsmem worker`` process, killable and restartable."""

    kind: str
    slot: int
    command: list[str]
    logs: Path
    port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.slot}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")}
        # The log goes to a file: a pipe nobody reads fills up and blocks the process.
        with open(self.logs / f"{self.name}-{self.starts}.log", "wb") as log:
            self.process = subprocess.Popen(
                self.command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def wait_ready(self, deadline: float) -> None:
        """A server answers ``/v1/health``; a worker is ready once started (it polls the queue itself)."""
        assert self.process is not None
        while self.port is not None:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} at start-up (see its log)")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/v1/health", timeout=1.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not answer /v1/health in time")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL, then reap: no shutdown of any kind runs in the process."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_SECONDS)

    def pause(self, seconds: float) -> None:
        """SIGSTOP for ``seconds``, then SIGCONT: the process keeps its jobs but stops heartbeating, so a
        lease it holds expires, another worker takes the job, and its own commit on waking must be fenced."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                os.kill(self.process.pid, signal.SIGCONT)

    def fenced_commits(self) -> int:
        """Jobs whose commit this node's runs refused because their lease was lost (the worker pool logs each)."""
        return sum(
            path.read_text(encoding="utf-8", errors="replace").count("lost its lease; its work was not committed")
            for path in self.logs.glob(f"{self.name}-*.log")
        )

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Cluster:
    """``servers`` × ``obsmem serve`` (each also running workers) and ``workers`` × ``obsmem worker``."""

    def __init__(
        self, root: Path, dsn: str, chat_url: str, *, servers: int = 3, workers: int = 2, lease: float = 2.0
    ) -> None:
        self.root = root
        self.lease = lease
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        data_dir = root / "data"
        data_dir.mkdir(exist_ok=True)
        config = root / "obsmem.toml"
        config.write_text(SETTINGS_TOML.format(dsn=dsn, chat_url=chat_url, lease=lease), encoding="utf-8")
        self.dsn = dsn
        self.config = config
        base = [sys.executable, "-P"]
        options = ["--config", str(config), "--data-dir", str(data_dir)]
        self.servers = []
        for slot in range(servers):
            port = free_port()
            command = [*base, "-m", "obsmem.surfaces.http", *options, "--port", str(port)]
            self.servers.append(Node("server", slot, command, self.logs, port))
        worker = [*base, "-m", "obsmem.surfaces.worker", *options, "--threads", "2", "--grace", "1"]
        worker += ["--log-level", "INFO"]
        self.workers = [Node("worker", slot, list(worker), self.logs) for slot in range(workers)]

    @property
    def nodes(self) -> list[Node]:
        return [*self.servers, *self.workers]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        for node in self.nodes:
            node.wait_ready(deadline)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def service(self) -> Obsmem:
        """A service of the caller's own over the same database (no workers), for checks."""
        return Obsmem(load_settings(self.config, data_dir=self.root / "data"))


# -- clients -----------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients, followers and killer did, shared between their threads."""

    acknowledged: dict[tuple[str, int], str] = field(default_factory=dict)
    failed_requests: int = 0
    searches: int = 0
    searches_found: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    pauses: int = 0
    client_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _words(rng: random.Random, n: int) -> str:
    vocabulary = ("deploy", "login", "retry", "cache", "schema", "index", "token", "worker", "lease", "fence")
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def client_thread(number: int, cluster: Cluster, tally: Tally, stop: threading.Event, seed: int) -> None:
    """:func:`client_loop`, its failure recorded for the checks (an exception would end only its thread)."""
    try:
        client_loop(number, cluster, tally, stop, seed)
    except BaseException as exc:  # noqa: BLE001 - reported by check_cluster
        with tally.lock:
            tally.client_errors.append(f"client {number}: {exc}")


def client_loop(
    number: int, cluster: Cluster, tally: Tally, stop: threading.Event, seed: int, batches: int | None = None
) -> None:
    """Append batches with explicit seqs to this client's sessions over random servers, retrying a batch on
    another server until one acknowledges it; after each acknowledgement, search for it on another server."""
    rng = random.Random(seed)
    sessions = [f"c{number}-s{k}" for k in range(2)]
    next_seq = dict.fromkeys(sessions, 1)
    done = 0
    with httpx.Client(timeout=10.0) as http:
        while not stop.is_set() and (batches is None or done < batches):
            session = rng.choice(sessions)
            first = next_seq[session]
            batch = []
            for offset in range(rng.randint(1, 4)):
                seq = first + offset
                token = f"k{number}x{session[-1]}q{seq}z"
                batch.append(
                    {
                        "role": rng.choice(["user", "assistant"]),
                        "seq": seq,
                        "content": f"{token} " + _words(rng, rng.randint(4, 30)),
                    }
                )
            if not _append_until_acknowledged(http, cluster, rng, session, batch, tally, stop):
                return
            next_seq[session] = first + len(batch)
            done += 1
            probe = batch[-1]
            _search(http, cluster, rng, probe["content"].split()[0], tally)
            time.sleep(rng.uniform(0.0, 0.15))


def _append_until_acknowledged(
    http: httpx.Client,
    cluster: Cluster,
    rng: random.Random,
    session: str,
    batch: list[dict[str, Any]],
    tally: Tally,
    stop: threading.Event,
) -> bool:
    deadline = time.monotonic() + 120.0
    while time.monotonic() < deadline:
        server = rng.choice(cluster.servers)
        try:
            reply = http.post(
                f"{server.base_url}/v1/projects/{PROJECT}/sessions/{session}/events", json={"events": batch}
            )
        except httpx.HTTPError:
            reply = None
        if reply is not None and reply.status_code == 200:
            with tally.lock:
                for event in batch:
                    tally.acknowledged[(session, event["seq"])] = event["content"]
            return True
        if reply is not None and reply.status_code < 500 and reply.status_code not in (408, 429):
            raise AssertionError(f"append refused with {reply.status_code}: {reply.text[:300]}")
        with tally.lock:
            tally.failed_requests += 1
        time.sleep(0.1)
    if stop.is_set():
        return False
    raise AssertionError(f"no server acknowledged a batch of {session} within 120 s")


def _search(http: httpx.Client, cluster: Cluster, rng: random.Random, token: str, tally: Tally) -> None:
    """An acknowledged event is found by exact conversation search on any server at once."""
    server = rng.choice(cluster.servers)
    try:
        reply = http.post(
            f"{server.base_url}/v1/projects/{PROJECT}/search", json={"query": token, "scope": "conversation"}
        )
    except httpx.HTTPError:
        with tally.lock:
            tally.failed_requests += 1
        return
    if reply.status_code >= 500:
        with tally.lock:
            tally.failed_requests += 1
        return
    assert reply.status_code == 200, reply.text[:300]
    hits = reply.json()["hits"]
    with tally.lock:
        tally.searches += 1
        tally.searches_found += any(token in hit["content"] for hit in hits)


# -- followers ---------------------------------------------------------------------------------------


class Follower(threading.Thread):
    """Follows one server's event stream, reconnecting with ``Last-Event-ID`` after any break."""

    def __init__(self, server: Node, stop: threading.Event) -> None:
        super().__init__(name=f"follower-{server.slot}", daemon=True)
        self.server = server
        self.stop_event = stop
        self.seen: set[int] = set()
        self.last_id = 0
        self.reconnects = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            headers = {"Accept": "text/event-stream"}
            if self.last_id:
                headers["Last-Event-ID"] = str(self.last_id)
            url = f"{self.server.base_url}/v1/projects/{PROJECT}/events"
            try:
                with (
                    httpx.Client(timeout=httpx.Timeout(5.0, read=30.0)) as http,
                    http.stream("GET", url, headers=headers) as stream,
                ):
                    if stream.status_code != 200:
                        raise httpx.HTTPError(f"status {stream.status_code}")
                    for line in stream.iter_lines():
                        if line.startswith("id:"):
                            event_id = int(line[3:].strip())
                            self.seen.add(event_id)
                            self.last_id = max(self.last_id, event_id)
                        if self.stop_event.is_set():
                            return
            except (httpx.HTTPError, ValueError):
                pass
            self.reconnects += 1
            self.stop_event.wait(0.2)


# -- the run -----------------------------------------------------------------------------------------


def killer_loop(
    cluster: Cluster, tally: Tally, rng: random.Random, rounds: int, round_seconds: float, pause_every: int = 0
) -> None:
    """Each round: wait a random part of the round, SIGKILL a random server or worker, start it again and wait
    until it serves, then wait out the round. One node is down at a time, so two servers always answer.

    Every ``pause_every``-th round (0: never) also pauses a random ``obsmem worker`` with SIGSTOP for twice
    the lease and a second, then lets it go on: SIGKILL never exercises fencing (a killed worker commits
    nothing), a paused one wakes up holding jobs whose leases others have taken, and its commits must be
    refused. Only workers are paused: a paused server would leave its clients waiting, not failing over."""
    for number in range(1, rounds + 1):
        start = time.monotonic()
        time.sleep(rng.uniform(0.2, 0.8) * round_seconds)
        node = rng.choice(cluster.nodes)
        node.kill()
        with tally.lock:
            tally.kills[node.kind] += 1
        time.sleep(rng.uniform(0.0, 0.5))
        node.start()
        cluster.wait_ready()
        if pause_every and number % pause_every == 0 and cluster.workers:
            rng.choice(cluster.workers).pause(2 * cluster.lease + 1.0)
            with tally.lock:
                tally.pauses += 1
        time.sleep(max(0.0, round_seconds - (time.monotonic() - start)))


def run_chaos(
    cluster: Cluster,
    *,
    rounds: int,
    round_seconds: float,
    clients: int,
    seed: int,
    settle_seconds: float = 120.0,
    pause_every: int = 0,
) -> dict[str, Any]:
    """Start everything, run ``rounds`` rounds of kills (and pauses, see :func:`killer_loop`) under load, let
    it settle, check; the figures."""
    rng = random.Random(seed)
    tally = Tally()
    stop = threading.Event()
    started = time.monotonic()
    cluster.start()
    phases = {"start_seconds": round(time.monotonic() - started, 1)}
    followers = [Follower(server, stop) for server in cluster.servers]
    client_stop = threading.Event()
    threads = [
        threading.Thread(target=client_thread, args=(n, cluster, tally, client_stop, seed * 100 + n), daemon=True)
        for n in range(clients)
    ]
    try:
        for thread in [*followers, *threads]:
            thread.start()
        killer_loop(cluster, tally, rng, rounds, round_seconds, pause_every)
        client_stop.set()
        for thread in threads:
            thread.join(timeout=150)
            assert not thread.is_alive(), "a client did not finish"
        phases["chaos_seconds"] = round(time.monotonic() - started - phases["start_seconds"], 1)
        with cluster.service() as service:
            figures = check_cluster(service, tally, followers, settle_seconds)
    finally:
        stop.set()
        client_stop.set()
        cluster.stop()
        for follower in followers:
            follower.join(timeout=10)
    figures |= {
        "rounds": rounds,
        "round_seconds": round_seconds,
        "clients": clients,
        "seed": seed,
        "kills": dict(sorted(tally.kills.items())),
        "pauses": tally.pauses,
        "fenced_commits": sum(node.fenced_commits() for node in cluster.nodes),
        "failed_requests_retried": tally.failed_requests,
        "searches": tally.searches,
        "searches_found": tally.searches_found,
        "follower_reconnects": sum(f.reconnects for f in followers),
        "seconds": round(time.monotonic() - started, 1),
    } | phases
    return figures


# -- the checks --------------------------------------------------------------------------------------


def settle(service: Obsmem, deadline: float) -> None:
    """Ask once for observation of every session's backlog (an append queues it only past the buffer
    threshold, so the tail of each session waits for this), then wait until no job is queued or running
    and no reflection is due (the workers of the cluster do the work). Nothing is asked again: a job that
    gave up and left events uncovered must show in the checks, not be redone here."""
    db: Any = service.store.get(PROJECT)  # type: ignore[attr-defined]
    sessions = [row[0] for row in db.query("SELECT session_id FROM sessions ORDER BY session_id")]
    for session in sessions:
        service.observe(PROJECT, session)
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        busy = db.query("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')")[0][0]
        due = [s for s in sessions if service.pipeline.reflect.due(db, s) is not None]
        if not busy and not due:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 1.5:  # longer than a housekeeping pass: nothing more comes
                return
        else:
            quiet_since = None
        time.sleep(0.2)
    raise AssertionError(f"not settled: {busy} jobs active, reflection due: {due}")


def unexplained_uncovered(db: Any) -> list[tuple[str, int]]:
    """Events no final coverage row covers whose session has no failed observe job: lost work.

    What is allowed, and why: an observe job may give up (its attempts spent on workers killed under it, or
    on model calls that failed), and it then ends ``failed`` with one ``job_failed`` event (checked apart);
    the events it was to cover stay uncovered until someone asks again, which is the pipeline's documented
    behaviour. Any other uncovered event was dropped by nobody's account, and fails the run."""
    return [
        (session, seq)
        for session, seq in db.query(
            "SELECT e.session_id, e.seq FROM events AS e WHERE NOT EXISTS (SELECT 1 FROM coverage AS c"
            " WHERE c.session_id = e.session_id AND c.seq = e.seq AND c.final = 1)"
            " AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.kind = 'observe' AND j.state = 'failed'"
            " AND j.order_key = 'session:' || e.session_id)"
        )
    ]


def check_cluster(service: Obsmem, tally: Tally, followers: list[Follower], settle_seconds: float) -> dict[str, Any]:
    from obsmem.pipeline import project, rebuild_active_memory, render_projection
    from obsmem.pipeline.reflect.generations import promoted_chain

    assert not tally.client_errors, tally.client_errors
    settle(service, time.monotonic() + settle_seconds)
    db: Any = service.store.get(PROJECT)  # type: ignore[attr-defined]
    # Every acknowledged write is present, as written.
    stored = {(s, q): c for s, q, c in db.query("SELECT session_id, seq, content FROM events")}
    missing = [key for key, content in tally.acknowledged.items() if stored.get(key) != content]
    assert not missing, f"{len(missing)} acknowledged events missing or altered, e.g. {missing[:3]}"
    assert len(stored) == len(tally.acknowledged), "events nobody acknowledged were stored"
    # Every job ended once: done, or failed with exactly one job_failed event; nothing is left running.
    jobs = db.query("SELECT id, kind, state, attempts FROM jobs")
    states = Counter(state for _, _, state, _ in jobs)
    assert set(states) <= {"done", "failed"}, states
    failed_events = Counter(
        row[0] for row in db.query("SELECT job_id FROM om_events WHERE type = 'job_failed' AND job_id IS NOT NULL")
    )
    failed = {job_id for job_id, _, state, _ in jobs if state == "failed"}
    assert set(failed_events) == failed and all(n == 1 for n in failed_events.values()), (failed_events, failed)
    # Effects applied once: each event covered once and cited by exactly one observation (the scripted
    # Observer writes one per event, naming its call, so a chunk committed twice would show).
    lost = unexplained_uncovered(db)
    assert not lost, f"{len(lost)} events left uncovered with no failed observe job to explain them: {lost[:3]}"
    coverage = Counter((s, q) for s, q in db.query("SELECT session_id, seq FROM coverage WHERE final = 1"))
    assert set(coverage.values()) <= {1}, "an event covered twice"
    citations = Counter((s, q) for s, q in db.query("SELECT session_id, seq FROM observation_sources"))
    assert set(citations) == set(coverage), "covered events and the events observations cite differ"
    duplicated = {key: n for key, n in citations.items() if n != 1}
    assert not duplicated, f"events observed more than once: {list(duplicated.items())[:5]}"
    # The generations of every session form one chain and the projection is the ledger's.
    assert db.query("SELECT count(*) FROM generations WHERE state = 'running'") == [(0,)]
    promoted = 0
    with db.read() as conn:
        for (session,) in conn.execute("SELECT DISTINCT session_id FROM active_generation").fetchall():
            promoted += len(promoted_chain(conn, session))
            number, items = rebuild_active_memory(conn, session)
            assert project(conn, session).text == render_projection(session, items, number).text, session
    # The followers on every server saw every event of the log.
    all_ids = {row[0] for row in db.query("SELECT id FROM om_events")}
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and any(not all_ids <= f.seen for f in followers):
        time.sleep(0.2)
    for follower in followers:
        unseen = all_ids - follower.seen
        assert not unseen, f"the follower of {follower.server.name} missed {len(unseen)} events"
    kinds = Counter(kind for _, kind, _, _ in jobs)
    return {
        "acknowledged_writes_checked": len(tally.acknowledged),
        "sessions": len({s for s, _ in stored}),
        "jobs_checked": len(jobs),
        "jobs_by_kind": dict(sorted(kinds.items())),
        "jobs_by_state": dict(sorted(states.items())),
        "job_attempts_over_one": sum(1 for _, _, _, attempts in jobs if attempts > 1),
        "observations_checked": sum(citations.values()),
        "events_left_to_failed_jobs": len(stored) - len(coverage),
        "generations_promoted": promoted,
        "events_in_log": len(all_ids),
        "events_seen_per_follower": [len(f.seen & all_ids) for f in followers],
    }


def to_json(figures: dict[str, Any]) -> str:
    return json.dumps(figures, indent=2, sort_keys=True)
