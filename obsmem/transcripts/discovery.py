"""Where each agent keeps its transcripts, honouring the agents' own environment variables.

| source | default location | variable |
| --- | --- | --- |
| ``claude-code`` | ``~/.claude/projects/**/*.jsonl`` (with sub-agents) | ``CLAUDE_CONFIG_DIR`` |
| ``codex`` | ``~/.codex/sessions/**/rollout-*.jsonl[.gz|.zst]``, ``archived_sessions/`` too | ``CODEX_HOME`` |
| ``gemini-cli`` | ``~/.gemini/tmp/*/chats/session-*.json[l]`` | ``GEMINI_CLI_HOME`` (the home holding ``.gemini``) |
| ``opencode`` | ``~/.local/share/opencode/opencode.db`` and ``storage/session/*/*.json`` | ``XDG_DATA_HOME`` |
| ``aider`` | ``.aider.chat.history.md`` in the current directory | — |

``openai-chat`` and ``obsmem`` have no default location: give the files. A directory given as a path is
searched with the same patterns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SOURCES = ("claude-code", "codex", "gemini-cli", "opencode", "aider", "openai-chat", "obsmem")


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def default_roots(source: str) -> list[Path]:
    """The folders (or files) where ``source`` keeps its transcripts on this machine."""
    if source == "claude-code":
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return [Path(base) / "projects" if base else _home() / ".claude" / "projects"]
    if source == "codex":
        base = Path(os.environ.get("CODEX_HOME") or _home() / ".codex")
        return [base / "sessions", base / "archived_sessions"]
    if source == "gemini-cli":
        home = Path(os.environ.get("GEMINI_CLI_HOME") or _home())
        return [home / ".gemini" / "tmp"]
    if source == "opencode":
        data = Path(os.environ.get("XDG_DATA_HOME") or _home() / ".local" / "share")
        return [data / "opencode"]
    if source == "aider":
        return [Path.cwd()]
    return []


def find_transcripts(source: str, root: Path) -> list[Path]:
    """The transcript files of ``source`` under ``root`` (``root`` itself when it is a file), oldest first."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    if source == "claude-code":
        # Given the agent's home (~/.claude), only its sessions: history.jsonl and the like are not sessions.
        sessions = root / "projects" if (root / "projects").is_dir() else root
        found = (p for p in sessions.rglob("*.jsonl") if p.name != "history.jsonl")
    elif source == "codex":
        found = (p for p in root.rglob("rollout-*") if p.name.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")))
    elif source == "gemini-cli":
        found = (p for p in root.rglob("*") if p.parent.name == "chats" and p.suffix in (".json", ".jsonl"))
    elif source == "opencode":
        database = [p for p in (root / "opencode.db", root.parent / "opencode.db") if p.is_file()][:1]
        tree = root / "storage" / "session" if (root / "storage").is_dir() else root / "session"
        found = [*database, *(tree.glob("*/*.json") if tree.is_dir() else [])]
    elif source == "aider":
        found = root.glob(".aider.chat.history.md")
    else:
        found = (p for p in root.rglob("*") if p.suffix == ".jsonl")
    # Oldest first: a resumed session replays the one it resumed, whose records then stay in their own session.
    return sorted((p for p in found if p.is_file()), key=_age)


def _age(path: Path) -> tuple[int, str]:
    try:
        return path.stat().st_mtime_ns, str(path)
    except OSError:
        return 0, str(path)


def claude_subagents(transcript: Path) -> list[Path]:
    """The sub-agent transcripts of a Claude Code session file, oldest first: ``<session>/subagents/
    agent-*.jsonl`` (current versions), and ``agent-*.jsonl`` files beside it whose first record names
    the session (older versions wrote every session's sub-agents into the project folder)."""
    session = transcript.name.removesuffix(".jsonl")
    folder = transcript.parent / session / "subagents"
    found = list(folder.glob("agent-*.jsonl")) if folder.is_dir() else []
    # Regular files only, before any is opened: opening a FIFO named like one waits for a writer for ever.
    beside = (p for p in transcript.parent.glob("agent-*.jsonl") if p.is_file())
    found.extend(p for p in beside if _first_session_id(p) == session)
    return sorted((p for p in found if p.is_file()), key=_age)


def _first_session_id(path: Path) -> str | None:
    """The ``sessionId`` of a JSONL file's first record (read up to its first newline, at most 1 MiB)."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(1 << 20)
        record = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return None
    session = record.get("sessionId") if isinstance(record, dict) else None
    return session if isinstance(session, str) else None


def discover(source: str) -> list[Path]:
    """Every transcript of ``source`` in its default locations."""
    files: list[Path] = []
    for root in default_roots(source):
        files.extend(find_transcripts(source, root))
    return files
