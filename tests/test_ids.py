"""Memory ids and recall prefixes."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem import ids
from obsmem.errors import InvalidId


def test_observation_id_is_sha256_of_canonical_json() -> None:
    document = (
        '{"content":"Café fix","kind":"observation","session_id":"s1",'
        '"source_refs":[["s1",1],["s1",2]],"timestamp":"2026-01-01 10:00"}'
    )
    expected = hashlib.sha256(document.encode("utf-8")).hexdigest()
    assert ids.observation_id("s1", "2026-01-01 10:00", "Café fix", [("s1", 2), ("s1", 1), ("s1", 2)]) == expected


def test_reflection_id_differs_from_observation_id_for_same_text() -> None:
    obs = ids.observation_id("s", "2026-01-01 10:00", "x", [("s", 1)])
    ref = ids.reflection_id("s", "2026-01-01 10:00", "x", [obs])
    assert obs != ref and len(ref) == 64


@given(st.text(alphabet="0123456789abcdef", min_size=12, max_size=64))
def test_valid_prefixes_are_accepted(prefix: str) -> None:
    assert ids.parse_id_prefix(prefix) == prefix


@given(st.text(max_size=80))
def test_only_lowercase_hex_of_12_to_64_characters_is_accepted(value: str) -> None:
    valid = 12 <= len(value) <= 64 and all(c in "0123456789abcdef" for c in value)
    if valid:
        assert ids.parse_id_prefix(value) == value
    else:
        with pytest.raises(InvalidId):
            ids.parse_id_prefix(value)


@pytest.mark.parametrize(
    "value", [None, 123, "ABCDEF123456", "abc", "g" * 12, "a" * 65, "abcdef12345 ", "abcdef123456\n"]
)
def test_malformed_ids(value: object) -> None:
    with pytest.raises(InvalidId):
        ids.parse_id_prefix(value)
