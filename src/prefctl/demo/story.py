"""What ``prefctl demo`` does to a customer profile, and which events each change yields.

The story is a handful of ``ProfileChange``s on one profile, in three acts: changes whose events
arrive verified, one whose event meets an outage of the receiver, and one whose event is too large
for the receiver (413). Each change edits a copy of the profile; ``send`` makes it through the REST
API (a merge patch for updates, as ``events trigger`` does), and ``expected_events`` runs the
emulator's own rules (``emulator.changes`` and ``emulator.matching``) over local copies, so the demo
knows before anything starts how many events reach its subscription: the receiver's fault plan
counts on it.

    >>> [len(events) for events in expected_events(STORY.changes, selections())]
    [1, 4, 1, 1]
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from prefctl.api.client import Resource
    from prefctl.api.profiles import ProfilesApi

__all__ = [
    "BODY_LIMIT_BYTES",
    "EVENT_TYPES",
    "RECIPIENT",
    "STORY",
    "SUBSCRIPTION_NAME",
    "ProfileChange",
    "Story",
    "expected_events",
    "selections",
]

SUBSCRIPTION_NAME = "demo"
RECIPIENT = "ops@example.com"
# The receiver's body limit: every event of the story fits, except the one meant to get a 413.
BODY_LIMIT_BYTES = 8 * 1024
NOTE_CHARACTERS = 12_000

# One or more types of each of four entities; profile.updated and profile.updatedfull are left
# out so that the outage act produces exactly one event for the subscription.
EVENT_TYPES = (
    "profile.created",
    "profile.replaced",
    "contacts.email.added",
    "contacts.phone.added",
    "preference.added",
    "consent.added",
    "consent.filterassociation.created",
)

Operation = Literal["create", "update", "replace"]
Edit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class ProfileChange:
    """One write to the profile: ``edit`` changes a copy of it (of ``{}`` for a create)."""

    title: str
    operation: Operation
    edit: Edit

    def request(self, profile_id: int | None) -> str:
        """The REST request it makes, as people read it: ``PATCH /profiles/1001``."""
        if self.operation == "create":
            return "POST /profiles"
        method = "PUT" if self.operation == "replace" else "PATCH"
        return f"{method} /profiles/{profile_id}"

    def after(self, before: Mapping[str, Any] | None) -> dict[str, Any]:
        new = copy.deepcopy(dict(before or {}))
        self.edit(new)
        return new

    def send(self, profiles: ProfilesApi, current: Resource | None) -> Resource:
        """Make the change through the REST API; returns the profile the service answered."""
        from prefctl.api.patches import merge_patch

        if self.operation == "create" or current is None:
            return profiles.create(self.after(None))
        new = self.after(current)
        profile_id = int(current["ProfileId"])
        if self.operation == "replace":
            return profiles.replace(profile_id, new)
        return profiles.patch(profile_id, merge_patch(current, new))


@dataclass(frozen=True)
class Story:
    """The acts of the demo: ``verified`` changes, then ``outage``, then ``oversized``."""

    verified: tuple[ProfileChange, ...]
    outage: ProfileChange
    oversized: ProfileChange

    @property
    def changes(self) -> tuple[ProfileChange, ...]:
        return (*self.verified, self.outage, self.oversized)


def selections() -> list[dict[str, Any]]:
    """The subscription's ``Subscriptions`` list: every type of ``EVENT_TYPES``, all filters."""
    from prefctl.api.subscriptions import selection

    return [selection(event_type) for event_type in EVENT_TYPES]


def expected_events(
    changes: Sequence[ProfileChange], chosen: Sequence[Mapping[str, Any]]
) -> list[list[str]]:
    """For each change in order, the event types it yields that the selections ``chosen`` take,
    by the emulator's own rules."""
    from prefctl.emulator.changes import events_for_change
    from prefctl.emulator.matching import matches

    result: list[list[str]] = []
    profile: dict[str, Any] | None = None
    for change in changes:
        new = change.after(profile)
        old = profile if change.operation == "update" else None
        events = events_for_change(change.operation, old, new)
        result.append([event.event_type for event in events if matches(chosen, event)])
        profile = new
    return result


# -- the story -------------------------------------------------------------------------------------
def _create(profile: dict[str, Any]) -> None:
    profile.update(
        {
            "CustomerName": {"FirstName": "Ada", "LastName": "Lovelace"},
            "DefaultLocale": "en-GB",
            "Emails": [{"Address": "ada@example.com", "Type": "Personal", "IsDefault": True}],
        }
    )


def _email_preference_consent(profile: dict[str, Any]) -> None:
    # Spec "Events → Rules" 4: one action, several independent events.
    profile["Emails"] = [
        *(profile.get("Emails") or []),
        {"Address": "ada@analytical-engine.example", "Type": "Work"},
    ]
    profile["ProfilePreferences"] = [
        *(profile.get("ProfilePreferences") or []),
        {"Program": "Newsletter", "Filter": "Weekly Digest", "Channel": "Email", "Status": "OptIn"},
    ]
    profile["Consents"] = [
        *(profile.get("Consents") or []),
        {
            "ConsentType": "Marketing",
            "ConsentVersion": "2026-01",
            "ConsentStatus": "Granted",
            "Filters": ["Weekly Digest"],
        },
    ]


def _mobile(profile: dict[str, Any]) -> None:
    profile["PhoneNumbers"] = [
        *(profile.get("PhoneNumbers") or []),
        {"Number": "+44 20 7946 0018", "Type": "Mobile", "IsMobile": True},
    ]


def _call_notes(profile: dict[str, Any]) -> None:
    line = "Called about the analytical engine; prefers email, weekly at most. "
    notes = (line * (NOTE_CHARACTERS // len(line) + 1))[:NOTE_CHARACTERS]
    profile["CustomFields"] = [
        *(profile.get("CustomFields") or []),
        {"Name": "CallNotes", "Value": notes},
    ]


STORY = Story(
    verified=(
        ProfileChange("create Ada Lovelace", "create", _create),
        ProfileChange(
            "add a work email, opt in to the Weekly Digest, grant Marketing consent",
            "update",
            _email_preference_consent,
        ),
    ),
    outage=ProfileChange("add a mobile number", "update", _mobile),
    oversized=ProfileChange(
        f"replace the profile, now with {NOTE_CHARACTERS // 1000} KB of call notes",
        "replace",
        _call_notes,
    ),
)
