"""docs/webhooks.md publishes test vectors: every value there must hold against signature.py."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime

import pytest

from prefctl.webhooks.signature import (
    SignatureError,
    SigningCredentials,
    format_header,
    parse_header,
    sign,
    signing_string,
    verify,
)
from tests.webhooks import _doc

DOC = _doc.text()
VECTORS = _doc.vectors(DOC)
VERIFIED_AT = datetime(2026, 11, 21, 19, 20, 30, 123000, tzinfo=UTC)
VECTOR_1 = SigningCredentials("DEMO_CORP", "events-signer", "test-hashkey")


def _credentials(vector: _doc.Vector) -> SigningCredentials:
    return SigningCredentials(vector["ClientId"], vector["SignatureUserId"], vector["Hashkey"])


def test_docs_publish_at_least_four_vectors() -> None:
    assert len(VECTORS) >= 4
    assert all(len(v.fields) == 7 for v in VECTORS), "each vector lists seven fields"


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["Timestamp"])
def test_vector_signed_string_signature_and_header_match_the_code(vector: _doc.Vector) -> None:
    credentials = _credentials(vector)
    timestamp = vector["Timestamp"]
    assert (
        signing_string(credentials.client_id, credentials.signature_user_id, timestamp)
        == (vector["Signed string"])
    )
    assert sign(credentials, timestamp) == vector["Signature"]
    assert format_header(timestamp, vector["Signature"]) == vector["Header"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["Timestamp"])
def test_vector_header_verifies_at_its_own_timestamp(vector: _doc.Vector) -> None:
    header = parse_header(vector["Header"])
    moment = datetime.fromisoformat(vector["Timestamp"].replace("Z", "+00:00"))
    assert verify(vector["Header"], _credentials(vector), now=moment) == header


def test_vector_1_is_the_one_the_variants_use() -> None:
    assert _credentials(VECTORS[0]) == VECTOR_1


@pytest.mark.parametrize("header", _doc.accepted_headers(DOC))
def test_documented_accepted_variant_verifies(header: str) -> None:
    verify(header, VECTOR_1, now=VERIFIED_AT, tolerance=300)


@pytest.mark.parametrize(("header", "reason"), _doc.rejected_headers(DOC))
def test_documented_rejected_variant_fails_for_the_documented_reason(
    header: str, reason: str
) -> None:
    assert reason in SignatureError.REASONS
    with pytest.raises(SignatureError) as info:
        verify(header, VECTOR_1, now=VERIFIED_AT, tolerance=300)
    assert info.value.reason == reason


def test_docs_list_every_rejection_reason() -> None:
    documented = {reason for _header, reason in _doc.rejected_headers(DOC)}
    assert documented == set(SignatureError.REASONS)


HEX_VECTORS = _doc.vectors(DOC, "vector-hex")


def test_docs_publish_hex_vectors_for_the_first_two_raw_vectors() -> None:
    assert [(v["ClientId"], v["Timestamp"]) for v in HEX_VECTORS] == [
        (v["ClientId"], v["Timestamp"]) for v in VECTORS[:2]
    ]


@pytest.mark.parametrize("vector", HEX_VECTORS, ids=lambda v: v["Timestamp"])
def test_hex_vector_signature_is_base64_of_the_hex_digest_and_verifies(
    vector: _doc.Vector,
) -> None:
    credentials = dataclasses.replace(_credentials(vector), encoding="hex")
    timestamp = vector["Timestamp"]
    assert base64.b64decode(vector["Signature"]) == vector["Hex digest"].encode()
    assert sign(credentials, timestamp) == vector["Signature"]
    assert format_header(timestamp, vector["Signature"]) == vector["Header"]
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    verify(vector["Header"], credentials, now=moment)


@pytest.mark.parametrize(
    ("vectors", "encoding", "other"), [(HEX_VECTORS, "raw", "hex"), (VECTORS[:2], "hex", "raw")]
)
def test_vector_in_the_other_encoding_is_a_mismatch_that_names_it(
    vectors: list[_doc.Vector], encoding: str, other: str
) -> None:
    for vector in vectors:
        credentials = dataclasses.replace(_credentials(vector), encoding=encoding)
        moment = datetime.fromisoformat(vector["Timestamp"].replace("Z", "+00:00"))
        with pytest.raises(SignatureError) as info:
            verify(vector["Header"], credentials, now=moment)
        assert info.value.reason == "mismatch"
        assert info.value.matches_encoding == other
        assert info.value.message.endswith(f"try --signature-encoding {other}")


def test_signature_that_matches_neither_encoding_names_none() -> None:
    header = "Timestamp=2026-11-21T19:20:30.123Z,Signature=" + "A" * 86 + "=="
    with pytest.raises(SignatureError) as info:
        verify(header, VECTOR_1, now=VERIFIED_AT)
    assert (info.value.matches_encoding, info.value.message) == (None, "Signature does not match")
