"""What verifying a request's ``Service-Webhook`` header can conclude, in the words the receiver's
records use (``"signature": "valid"`` in ``prefctl receive -o json`` and ``--record`` files).

Here, below the receiver and the dispatcher, because both read them: the receiver writes them,
and replay (``dispatcher/captures.py``) reads them back to skip recorded forgeries.
"""

from __future__ import annotations

__all__ = ["AUTHENTIC_SIGNATURES", "SignatureResult"]


class SignatureResult:
    """The outcome of signature verification: ``Verdict.signature``."""

    VALID = "valid"
    INVALID = "invalid"  # a header that does not verify; ``reason`` says why
    MISSING = "missing"  # an event without a Service-Webhook header
    UNVERIFIED = "unverified"  # --no-verify
    NOT_REQUIRED = "not_required"  # a handshake, which carries no signature


# A request whose event can be trusted as the service's: verified, or not asked to be.
AUTHENTIC_SIGNATURES = frozenset({SignatureResult.VALID, SignatureResult.UNVERIFIED})
