"""Secrets never reach the model server, the database files or the logs."""

from __future__ import annotations

import json
import logging
import secrets
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem.redaction import find_secrets, redact_json, redact_text, redacted_prefix, secret_kind
from obsmem.secret_detectors import DETECTORS, Scan
from support.pipeline_service import pipeline_service, user, words
from support.scripted_chat import ObserverScript, Reply, Request, ScriptedChatServer, record, text


def planted() -> dict[str, str]:
    """Fresh secrets per run, so a match can only come from this test."""
    token = secrets.token_hex(16)
    return {
        "openai": f"sk-proj-{token}ABCDEFGH",
        "github": f"ghp_{token}{token[:8]}",
        "aws": "AKIA" + secrets.token_hex(8).upper(),
        "url_password": f"pw-{token[:12]}",
        "assigned": f"hunter{secrets.randbelow(10**8):08d}",
        "private_key_body": f"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC{token}",
        "bearer": f"tok{token}",
        "json_secret": f"zz{token}zz",
    }


def secret_events(s: dict[str, str]) -> list[dict[str, object]]:
    return [
        user(f"my key is {s['openai']}, please configure the client " + words(40)),
        {
            "role": "assistant",
            "type": "tool_call",
            "tool_name": "bash",
            "tool_args": {
                "cmd": f"git clone https://{s['github']}@github.com/acme/app.git",
                "env": {"AWS_ACCESS_KEY_ID": s["aws"], "DB_PASSWORD": s["json_secret"]},
            },
        },
        {
            "role": "tool",
            "type": "tool_result",
            "tool_name": "bash",
            "content": f"connecting to postgres://app:{s['url_password']}@db.internal:5432/app\n"
            f"-----BEGIN PRIVATE KEY-----\n{s['private_key_body']}\n-----END PRIVATE KEY-----\n"
            f"curl -H 'Authorization: Bearer {s['bearer']}' https://api.example.com",
        },
        user(f"oh and the admin password={s['assigned']} " + words(40)),
    ]


def every_file_byte(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


def test_a_planted_secret_reaches_neither_model_nor_database_nor_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    s = planted()
    script = ObserverScript()

    def leaky_observer(request: Request) -> Reply:
        # A model that tries to write a key-shaped string anyway (it cannot have seen the real ones).
        if request.messages[-1]["role"] == "user":
            reply = script(request)
            extra = {
                "content": f"Agent exported OPENAI_API_KEY=sk-proj-{'q' * 30}",
                "timestamp": "2026-05-01 10:32",
                "importance": "high",
                "source_refs": [1],
            }
            body = reply.body
            assert isinstance(body, dict)
            call = body["choices"][0]["message"]["tool_calls"][0]["function"]
            args = json.loads(call["arguments"])
            args["observations"].append(extra)
            return record(*args["observations"])
        return text("done")

    data = tmp_path / "data"
    with ScriptedChatServer(leaky_observer) as server:
        memory = pipeline_service(data, server)
        memory.append_events("p", "s1", secret_events(s))
        transcript = tmp_path / "t.jsonl"
        transcript.write_text("\n".join(json.dumps(e) for e in secret_events(s)))
        memory.import_jsonl("p", transcript, session_id="s2")
        memory.add_observations(
            "p",
            [
                {
                    "session_id": "s1",
                    "timestamp": "2026-05-01 10:40",
                    "importance": "low",
                    "content": f"user pasted {s['openai']}",
                    "source_refs": [1],
                }
            ],
        )
        memory.observe("p", "s1")
        memory.observe("p", "s2")
        assert memory.worker_pool().drain(timeout=60)
        recalled = [memory.recall("p", hit.id).to_dict() for hit in memory.search("p", "REDACTED").hits]
        sent = server.all_bytes()
        projection = memory.memory("p", "s1").text
        memory.close()

    assert len(server.requests) >= 4  # the observer did run on both sessions
    stored = every_file_byte(data)
    logged = caplog.text
    for name, secret in s.items():
        for where, blob in (("model server", sent), ("database files", stored)):
            assert secret.encode() not in blob, f"{name} reached the {where}"
        assert secret not in logged, f"{name} reached the logs"
        assert secret not in json.dumps(recalled) and secret not in projection
    assert b"sk-proj-qqqqqqqq" not in stored  # the model's own key-shaped output was redacted too
    assert b"[REDACTED:" in stored and b"[REDACTED:" in sent
    # The text around a secret is kept, with a marker where the secret was.
    sources = [event["content"] for result in recalled for event in result["sources"]]
    assert any(c.startswith("my key is [REDACTED:api_key], please configure the client") for c in sources)


secret_shapes = st.sampled_from(
    [
        "sk-proj-abcdefghijklmnopqrstuvwx1234",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "AKIAABCDEFGHIJKLMNOP",
        "xoxb-1234567890-abcdefghij",
        "AIza" + "b" * 35,
        "hf_" + "c" * 34,
        "glpat-" + "d" * 20,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
    ]
)
filler = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@given(filler, secret_shapes, filler)
def test_token_shapes_are_redacted_wherever_they_appear(before: str, secret: str, after: str) -> None:
    redacted = redact_text(f"{before} {secret} {after}")
    assert secret not in redacted
    assert redact_text(redacted) == redacted  # idempotent


@given(st.text(max_size=200))
def test_redaction_is_idempotent_on_any_text(value: str) -> None:
    once = redact_text(value)
    assert redact_text(once) == once


# Pieces a text is composed of to make detectors' spans overlap: secret shapes, the leads some detectors hang
# off (headers, scheme words, options, assignments, prose, URLs, key blocks), separators some values stop at
# and others run over, and fillers longer than a value judged before it is hidden (256 characters).
_LEADS = [
    "Authorization: ",
    "authorization=",
    "Proxy-Authorization: Basic ",
    "Bearer ",
    "TOKEN =",
    "curl -u admin:",
    "--user=bob:",
    "password=",
    "DB_PASSWORD=",
    "--password ",
    "api_key=",
    "client_secret: ",
    "my password is ",
    "token is ",
    "secret ",
    "postgres://admin:",
    "-----BEGIN RSA PRIVATE KEY-----\n",
]
_SHAPES = [
    "sk-proj-abcdefghijklmnopqrstuvwx1234",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
    "AIza" + "b" * 35,
    "glpat-" + "d" * 20,
    "npm_" + "e" * 36,
    "0123456789abcdef0123456789abcdef",
    "abcd@efgh12345678",
    "hunter22",
]
composed = st.lists(
    st.one_of(
        st.sampled_from(_LEADS),
        st.sampled_from(_SHAPES),
        st.sampled_from(list(" !@.:/=<\"',;)-_\n")),
        st.builds(
            lambda unit, count: unit * count,
            st.sampled_from(["x", "A1", "-", ".", "=", "<", "a:"]),
            st.integers(1, 300),
        ),
    ),
    min_size=1,
    max_size=7,
).map("".join)


@given(composed)
def test_what_is_hidden_is_never_less_than_any_detectors_span_and_redacting_again_changes_nothing(text: str) -> None:
    hidden = {index for start, end, _ in find_secrets(text) for index in range(start, end)}
    scan = Scan(text, text.lower())
    for detector in DETECTORS:
        for start, end in detector.find(scan):
            shown = set(range(start, end)) - hidden
            assert not shown, (detector.name, text[min(shown) : max(shown) + 1])
    # A token glued to the end of another (a Google key is exactly 35 characters after AIza) was shown by the
    # first pass, its left edge refusing it after a letter, and hidden by the second; so was a header, option,
    # prose lead or URL glued to the end of a span ("AKIA...--password x"), now hidden by a pass over the first's
    # output.
    once = redact_text(text)
    assert redact_text(once) == once, once


def test_a_lead_glued_to_the_end_of_a_secret_is_hidden_too() -> None:
    # Each detector refuses a lead after a letter, a digit or a dash, so a single pass kept the password.
    aws, google, npm = "AKIAIOSFODNN7EXAMPLE", "AIza" + "b" * 35, "npm_" + "e" * 36
    assert "Sunshine1" not in redact_text(f"{aws}--password Sunshine1")
    assert "hunter22" not in redact_text(f"{google}token is hunter22")
    assert "pw123456" not in redact_text(f"{npm}postgres://admin:pw123456@db")
    assert "pw123456" not in redacted_prefix(f"{npm}postgres://admin:pw123456@db" + "x" * 100, 80)


def test_a_token_glued_to_the_end_of_another_is_hidden_with_it() -> None:
    google, npm, key = "AIza" + "b" * 35, "npm_" + "e" * 36, "sk-proj-abcdefghijklmnopqrstuvwx1234"
    assert redact_text(google + key) == "[REDACTED:google_api_key]"
    assert redact_text(f"a {npm}{google}{key} b") == "a [REDACTED:npm_token] b"
    assert redact_text("the task-abcdefghijklmnopqrstuvwx1234 queue") == "the task-abcdefghijklmnopqrstuvwx1234 queue"


def test_overlapping_detections_are_hidden_as_their_union_named_by_the_first() -> None:
    # A header's value over 256 characters is hidden unjudged up to the "!" no header value holds; the
    # assignment inside it runs to the end. Only the first span was hidden, and the tail was stored.
    assert redact_text("Authorization: api_key=" + "x" * 300 + "!tail7secret") == "Authorization: [REDACTED:token]"
    assert (
        redact_text("curl -u admin:<" + "x" * 300 + "api_key=abcd@efgh12345678") == "curl -u admin:[REDACTED:password]"
    )
    block = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    assert redact_text("secret=0123456789abcdef" + block) == "secret=[REDACTED:secret]"
    assert find_secrets("x Authorization: api_key=" + "x" * 300 + "!tail7secret") == [(17, 17 + 8 + 300 + 12, "token")]


def test_everyday_text_is_left_alone() -> None:
    for sentence in (
        "password: required",
        "token usage was 1234 tokens",
        "max_tokens: 4096",
        "see https://example.com/a?b=1",
        "the tokenizer splits on spaces",
        'secret = "abc"',
    ):
        assert redact_text(sentence) == sentence


def test_json_values_under_secret_names_are_hidden() -> None:
    value = {"password": "x1", "nested": [{"client_secret": "abc"}], "token_count": 5, "name": "ok"}
    assert redact_json(value) == {
        "password": "[REDACTED:secret]",
        "nested": [{"client_secret": "[REDACTED:secret]"}],
        "token_count": 5,
        "name": "ok",
    }


def test_json_secrets_nested_under_secret_names_in_argv_and_env_pairs_are_hidden() -> None:
    value = {
        "secret": ["hunter2xyz", {"inner": "hunter3xyz"}],
        "password": {"value": "hunter2xyz", "enabled": True},
        "argv": ["mysql", "--password", "hunter2xyz", "-h", "db", "--db-token", "abc", "--verbose", "x"],
        "env": [{"name": "DB_PASSWORD", "value": "hunter2xyz"}, {"name": "HOME", "value": "/root"}],
        "token_count": 5,
    }
    redacted = redact_json(value)
    assert "hunter" not in json.dumps(redacted)
    assert redacted == {
        "secret": ["[REDACTED:secret]", {"inner": "[REDACTED:secret]"}],
        "password": {"value": "[REDACTED:secret]", "enabled": True},
        "argv": [
            "mysql",
            "--password",
            "[REDACTED:secret]",
            "-h",
            "db",
            "--db-token",
            "[REDACTED:secret]",
            "--verbose",
            "x",
        ],
        "env": [{"name": "DB_PASSWORD", "value": "[REDACTED:secret]"}, {"name": "HOME", "value": "/root"}],
        "token_count": 5,
    }
    assert redact_json(redacted) == redacted


def test_auth_scheme_words_in_prose_are_kept_and_real_credentials_are_not() -> None:
    for sentence in (
        "We need a basic understanding of how tokens flow",
        "Basic troubleshooting comes first",
        "Token estimation undercounts emoji",
        "BEARER TOKEN SUPPORT was added",
    ):
        assert redact_text(sentence) == sentence
    assert redact_text("Authorization: Basic dXNlcjpwYXNz") == "Authorization: Basic [REDACTED:token]"
    assert redact_text("Bearer abcDEF123456ghiJKL") == "Bearer [REDACTED:token]"


# -- the corpus: positives and near misses, one case per line of tests/data/redaction_corpus.jsonl --------

CORPUS_FILE = Path(__file__).resolve().parent / "data" / "redaction_corpus.jsonl"
CORPUS: list[dict[str, str]] = [json.loads(line) for line in CORPUS_FILE.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("case", CORPUS, ids=[case["reason"] for case in CORPUS])
def test_corpus_case(case: dict[str, str]) -> None:
    redacted = redact_text(case["text"])
    if case["expect"] == "keep":
        assert redacted == case["text"], case["reason"]
    else:
        assert case["expect"] == "redact"
        assert case["secret"] not in redacted, case["reason"]
        assert f"[REDACTED:{case['kind']}]" in redacted, (case["reason"], redacted)
    assert redact_text(redacted) == redacted


def test_the_corpus_has_positives_and_near_misses_with_reasons() -> None:
    expectations = [case["expect"] for case in CORPUS]
    assert expectations.count("redact") >= 30 and expectations.count("keep") >= 30
    assert all(case["reason"].strip() for case in CORPUS)
    assert len({case["text"] for case in CORPUS}) == len(CORPUS)


def test_every_detector_finds_at_least_one_corpus_positive() -> None:
    positives = [case["text"] for case in CORPUS if case["expect"] == "redact"]
    for detector in DETECTORS:
        hits = [text for text in positives if detector.find(Scan(*_view(text)))]
        assert hits, f"no corpus case exercises detector {detector.name}"


def _view(text: str) -> tuple[str, str]:
    view = "".join(char for char in text if unicodedata.category(char) != "Cf")
    return view, view.lower()


def test_every_unicode_format_character_is_ignored_when_matching() -> None:
    key = "AKIAIOSFODNN7EXAMPLE"
    format_characters = [chr(cp) for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Cf"]
    assert len(format_characters) > 150
    for char in format_characters:
        assert redact_text(key[:9] + char + key[9:]) == "[REDACTED:aws_access_key]", f"U+{ord(char):04X}"


invisible = st.sampled_from(["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\U000e0041"])


@given(filler, secret_shapes, invisible, st.integers(min_value=1, max_value=19), filler)
def test_a_secret_split_by_an_invisible_character_is_redacted_and_the_rest_kept(
    before: str, secret: str, char: str, at: int, after: str
) -> None:
    split = secret[:at] + char + secret[at:]
    redacted = redact_text(f"{before} {split} {after}")
    assert split not in redacted and secret[at:] not in redacted
    assert redact_text(redacted) == redacted


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200))
def test_redaction_only_ever_replaces_spans_with_markers(value: str) -> None:
    # Whatever the text, what is not a secret comes out character for character (invisible ones too).
    redacted = redact_text(value)
    kept = redacted.split("[REDACTED:")
    position = 0
    for piece in [kept[0]] + [part.split("]", 1)[1] for part in kept[1:] if "]" in part]:
        found = value.find(piece, position)
        assert found >= 0
        position = found + len(piece)


def test_json_keys_are_redacted_and_secret_names_match_through_invisible_characters() -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwx1234"
    value = {key: 1, key + "5": 2, "pass\u200bword": "hunter", "DB_PASS": "x", "bypass": "kept"}
    assert redact_json(value) == {
        "[REDACTED:api_key]": 1,
        "[REDACTED:api_key]#2": 2,
        "pass\u200bword": "[REDACTED:secret]",
        "DB_PASS": "[REDACTED:secret]",
        "bypass": "kept",
    }
    assert redact_json(redact_json(value)) == redact_json(value)


def test_secret_kind_names_what_an_identifier_looks_like() -> None:
    assert secret_kind("ghp_abcdefghijklmnopqrstuvwxyz0123456789") == "github_token"
    assert secret_kind("AKIA\u200bIOSFODNN7EXAMPLE") == "aws_access_key"
    assert secret_kind("password:hunter22") == "secret"
    for ordinary in ("s1", "fix-login", "123e4567-e89b-12d3-a456-426614174000", "a" * 64, "claude:2026-05-01"):
        assert secret_kind(ordinary) is None


def test_invisible_characters_outside_a_secret_are_kept_where_they_were() -> None:
    text = "\u200bx\u200d\u200d AKIA\u200b\u2060IOSFODNN7EXAMPL\u00adE \ufeffpass\u200bword=hunter22x\u200b end\u200c"
    assert redact_text(text) == (
        "\u200bx\u200d\u200d [REDACTED:aws_access_key] \ufeffpass\u200bword=[REDACTED:secret]\u200b end\u200c"
    )
