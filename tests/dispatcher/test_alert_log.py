"""Reading alert emails back quickly (``prefctl alerts``) gives what the email package gives.

``parse_headers``, ``DecodedHeaders`` and ``message_id`` take shortcuts for plain headers and
``read_mbox_bytes`` splits the mbox in one pass; each must read a message exactly as
``email.parser.HeaderParser`` with the default policy, and an mbox as ``mailbox.mbox``, including
the odd ones, which they leave to those.
"""

from __future__ import annotations

import mailbox
from email.parser import BytesHeaderParser, HeaderParser
from email.policy import default
from pathlib import Path

import pytest

from prefctl.dispatcher.alerts.mail import (
    DecodedHeaders,
    message_id,
    parse_headers,
    read_mbox,
    read_mbox_bytes,
)

ALERT = (
    "From: prefctl alerts <alerts@localhost>\n"
    "To: ops@example.com, =?utf-8?q?J=C3=BCrg?= <jurg@example.org>\n"
    "Subject: [Sandbox] DEMO_CORP: 1 webhook event dead-lettered for subscription\n"
    ' "=?utf-8?q?Bestellungen_=E2=80=93_Z=C3=BCrich?=" (3)\n'
    "Date: Thu, 01 Jan 2026 00:00:00 +0000\n"
    "Message-ID: <alert.3.1.1767225600000@demo-corp.prefctl>\n"
    "X-Prefctl-Alert-Id: 3\n"
    "X-Prefctl-Subscription-Name: =?utf-8?b?5rOo5paH44K144O844OT44K5?=\n"
    "X-Prefctl-Account:\tDEMO_CORP  \n"
    "Content-Type: text/plain; charset=utf-8\n"
    "\n"
    "Webhook events could not be delivered.\n"
)

MESSAGES = {
    "an alert": ALERT,
    "a subject folded after its colon": "Subject:\n [Sandbox] long\n\tfolded  text\n\nbody\n",
    "repeated headers": "To: a@example.com\nto: b@example.com\nTO: c@example.com\n\nbody\n",
    "an empty value": "Subject:\nX-Empty:   \nMessage-ID:\n\n",
    "an odd Message-ID": "Message-ID: <a@b> (comment) trailing\n\n",
    "an encoded Message-ID": "Message-ID: =?utf-8?q?123?=\n\n",
    "an undecodable encoded word": "Subject: =?unknown?q?x?= and =?utf-8?b?!!?=\n\n",
    "CRLF line ends": "Subject: hello\r\nMessage-ID: <a@b>\r\n\r\nbody\r\n",
    "a unix From line": "From someone Thu Jan  1 00:00:00 2026\nSubject: hi\n\nbody\n",
    "a line that is no header": "Subject: hi\nnot a header\nTo: a@b\n\nbody\n",
    "a first line that is a fold": " folded\nSubject: hi\n\nbody\n",
    "a missing header name": ": value\nSubject: hi\n\n",
    "a multipart type without parts": "Content-Type: multipart/mixed;\n boundary=x\n\nbody\n",
    "no body": "Subject: hi\nMessage-ID: <a@b>",
    "no headers": "\nbody\n",
    "nothing": "",
    "8-bit text": "Subject: Zürich\nX-Prefctl-Subscription-Name: 注文\n\nbody\n",
}
NAMES = ["From", "To", "Subject", "Date", "Message-ID", "X-Prefctl-Alert-Id", "X-Empty", "X-None"]
NAMES += ["X-Prefctl-Subscription-Name", "X-Prefctl-Account", "Content-Type"]


@pytest.mark.parametrize("text", MESSAGES.values(), ids=MESSAGES.keys())
def test_parse_headers_reads_a_message_as_the_email_package_does(text: str) -> None:
    for source in (text, text.encode("utf-8")):
        if isinstance(source, bytes):
            expected = BytesHeaderParser(policy=default).parsebytes(source)
        else:
            expected = HeaderParser(policy=default).parsestr(source)

        parsed = parse_headers(source)

        assert list(parsed.raw_items()) == list(expected.raw_items())
        assert parsed.get_payload() == expected.get_payload()
        assert [type(d) for d in parsed.defects] == [type(d) for d in expected.defects]
        headers = DecodedHeaders(parsed)
        for name in NAMES:
            value = expected[name]
            assert headers.get(name) == (None if value is None else str(value)), name
            assert headers.get_all(name) == [str(v) for v in expected.get_all(name, [])], name
        assert message_id(source) == str(expected["Message-ID"] or "")


def test_decoded_headers_of_an_alert_are_its_unicode_text() -> None:
    headers = DecodedHeaders(parse_headers(ALERT))

    assert headers.get("X-Prefctl-Subscription-Name") == "注文サービス"
    assert headers.get("Subject") == (
        "[Sandbox] DEMO_CORP: 1 webhook event dead-lettered for subscription"
        ' "Bestellungen – Zürich" (3)'
    )
    assert headers.get_all("To") == ["ops@example.com, Jürg <jurg@example.org>"]
    assert headers.get("x-prefctl-account") == "DEMO_CORP  "


MBOXES = {
    "alerts": f"From MAILER-DAEMON Thu Jan  1 00:00:00 2026\n{ALERT}\n"
    f"From MAILER-DAEMON Thu Jan  1 00:10:00 2026\n{ALERT}\n",
    "a From line in a body": "From a\nSubject: x\n\nFrom the body\n>From quoted\n\n",
    "no empty line before From": "From a\nSubject: x\n\nbody\nFrom b\nSubject: y\n\nbody\n",
    "empty messages": "From a\n\nFrom b\nFrom c\n\n\n",
    "text before the first From": "garbage\n\nFrom a\nSubject: x\n\nbody",
    "no From at all": "Subject: x\n\nbody\n",
    "a From line at the end without a newline": "From a\nSubject: x\n\nbody\n\nFrom b",
}


@pytest.mark.parametrize("text", MBOXES.values(), ids=MBOXES.keys())
def test_read_mbox_bytes_splits_an_mbox_as_the_mailbox_module_does(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "alerts.mbox"
    path.write_bytes(text.encode())
    box = mailbox.mbox(path, create=False)
    expected = [box.get_bytes(key) for key in box.iterkeys()]
    box.close()

    assert read_mbox_bytes(path) == expected
    assert len(read_mbox(path)) == len(expected)
