"""The redaction's one-pass scan finds exactly what the redaction before it found.

``support/redaction_reference.py`` is a frozen copy of the detectors and the engine as they were before
the literals of every detector were found in one Aho-Corasick pass and the word detectors were gated by
one combined pattern. Redaction must stay deterministic across versions (an event appended again must
redact to the same text, or it would conflict with itself), so the shipped engine must give the same
spans and the same text as the reference on the corpus and on random text with secrets embedded in it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.redaction import find_secrets, redact_json, redact_text
from support import redaction_reference as reference

CORPUS = [json.loads(line) for line in (Path(__file__).parent / "data" / "redaction_corpus.jsonl").open()]

# Pieces a text is built from: secrets of every detector, the words the detectors hang off (with what
# makes them match and what makes them fail), code and prose, and characters that shift offsets
# (invisible characters, letters whose lowercase is longer or folds unusually, astral characters).
SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwx1234",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghij",
    "AKIAIOSFODNN7EXAMPLE",
    "ASIA" + "Q" * 16,
    "xoxb-1234567890-abcdefghij",
    "AIza" + "b" * 35,
    "hf_" + "c" * 34,
    "npm_" + "e" * 36,
    "glpat-" + "d" * 20,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz",
    "postgres://admin:s3cretPw@db.internal:5432/app",
    "Authorization: Bearer abc123DEF456ghi",
    "Proxy-Authorization: Basic dXNlcjpwYXNzd29yZA==",
    "Bearer eyJhbGciOiJIUzI1NiJ9abc",
    "TOKEN Zx81kLmn0PqrSt",
    "password=hunter22",
    'DB_PASSWORD="hunter two"',
    "passwd: letmein",
    "PASSWORD=Sunshine",
    "password: str",
    "password=getpass()",
    "--password hunter2xyz",
    "--db-pass 'a b'",
    "-p --pwd s3cr3t",
    "curl -u admin:hunter22 https://x",
    "--user=bob:pa55word",
    "docker run -u 1000:1000",
    "api_key = 'ABCDEF0123456789abcdef'",
    "OPENAI_API_KEY=sk-abc",
    "client_secret: 9f8e7d6c5b4a39281706",
    "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "my password is hunter2",
    "the API key for staging was 'a b c'",
    "the password is required",
    "if token is other_token:",
    "token is ghjk1234.",
    "webhook secret 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
    "hmac key: 0123456789abcdef0123456789abcdef01",
    "signing key is the value 00112233445566778899aabbccddeeff",
    "credentials: [REDACTED:secret]",
    "secretoken=abc1234567",
    "pwd",
    "DB_PASS=abc123def",
]
WORDS = [
    "token",
    "Token",
    "auth",
    "authorization",
    "client",
    "pass",
    "passphrase",
    "api",
    "secret",
    "private",
    "access",
    "credential",
    "signing",
    "hmac",
    "bearer",
    "basic",
    "is",
    "was",
    "for the",
    "=",
    ": ",
    ":=",
    "=>",
    '"',
    "'",
    "-u ",
    "--user ",
    "://",
    "@",
    "-",
    "_",
    ".",
    "fix the login cache",
    "src/auth/token_cache.py:42",
    "0123456789abcdef0123456789abcdef",
    "\n",
]
ODD = ["\u200b", "\u00ad", "\ufeff", "\u202e", "İ", "ſ", "\u212a", "ß", "é", "\U0001f600", "Ω", "\u0130x"]

piece = st.one_of(
    st.sampled_from(SECRETS),
    st.sampled_from(WORDS),
    st.sampled_from(ODD),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:=/ '\"", max_size=24),
)
texts = st.lists(st.tuples(piece, st.sampled_from(["", " ", "", "\n", "\u200b"])), max_size=14).map(
    lambda parts: "".join(text + joint for text, joint in parts)
)


def _reference_json(value: Any) -> Any:
    return reference.redact_json(value)


def test_the_corpus_redacts_exactly_as_before() -> None:
    for case in CORPUS:
        text = case["text"]
        assert find_secrets(text) == reference.find_secrets(text), case["reason"]
        assert redact_text(text) == reference.redact_text(text), case["reason"]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_random_text_with_secrets_redacts_exactly_as_before(text: str) -> None:
    assert find_secrets(text) == reference.find_secrets(text)
    assert redact_text(text) == reference.redact_text(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_redacts_exactly_as_before(text: str) -> None:
    assert find_secrets(text) == reference.find_secrets(text)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), texts),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.one_of(st.sampled_from(WORDS), texts), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_tool_arguments_redact_exactly_as_before(value: Any) -> None:
    assert redact_json(value) == _reference_json(value)


def test_a_long_tool_output_redacts_exactly_as_before() -> None:
    lines = [
        f"{word} {secret} line {number}"
        for number, (word, secret) in enumerate(zip(WORDS * 3, SECRETS * 3, strict=False))
    ]
    text = "\n".join(lines * 20)
    assert find_secrets(text) == reference.find_secrets(text)
    assert len(find_secrets(text)) > 100
