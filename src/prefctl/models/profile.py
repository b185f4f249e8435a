"""The customer profile (docs/api.md) and the elements it holds.

Validation is what a real service would do, no more: shapes of emails, phone numbers, locales and
country codes; non-empty names; and **unique identities** inside each list, because events are
computed per element (``emulator/changes.py``) and an ambiguous element has no identity:

    Emails by Address (case-insensitive), PhoneNumbers by Number, Addresses by Type,
    AlternateIds by Type, Consents by ConsentType, CustomFields by Name, Groups by Name,
    Tags by value, preferences of one list by (Program, Filter, Channel),
    preference Attributes by Key; at most one IsDefault per contact list.

A consent's ``Elements`` are *contact references*: ``"Email:<Address>"``, ``"Phone:<Number>"`` or
``"Address:<Type>"`` (see ``contact_ref``), and each must name a contact of the same profile.
Errors name the list they concern (``Emails``, ``Consents``…) and say which item is at fault.

>>> Profile.model_validate({"Emails": [{"Address": "ann@example.com"}]}).emails[0].address
'ann@example.com'
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

from pydantic import Field, StringConstraints, ValidationInfo, field_validator

from prefctl.models._base import Timestamp, WireModel, strict_model
from prefctl.models.problem import pattern_in_words

__all__ = [
    "CONTACT_REF_KINDS",
    "Address",
    "AlternateId",
    "Consent",
    "ConsentStatus",
    "CustomField",
    "CustomerName",
    "DeactivateRequest",
    "Edited",
    "Email",
    "Group",
    "PhoneNumber",
    "Preference",
    "PreferenceAttribute",
    "PreferenceStatus",
    "Profile",
    "ProfilePage",
    "StrictDeactivateRequest",
    "StrictProfile",
    "contact_ref",
]

T = TypeVar("T")

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
PersonName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
EmailAddress = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        max_length=254,
        pattern=pattern_in_words(
            r"^[^@\s]+@[^@\s]+\.[^@\s]+$", "an email address such as ann@example.com"
        ),
    ),
]
# Digits with an optional leading +, and the separators people type; at least 4 characters.
PhoneNumberText = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        pattern=pattern_in_words(
            r"^\+?[0-9][0-9 ().-]{3,31}$",
            "a phone number such as +44 20 7946 0958 (4 to 32 digits, spaces, dots, dashes"
            " or brackets, starting with a digit or +)",
        ),
    ),
]
CountryCode = Annotated[  # ISO 3166-1 alpha-2
    str,
    StringConstraints(
        pattern=pattern_in_words(r"^[A-Z]{2}$", "a two-letter country code in capitals, such as GB")
    ),
]
Locale = Annotated[  # BCP 47
    str,
    StringConstraints(
        pattern=pattern_in_words(
            r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$",
            "a language tag such as en or en-GB (the language in lower case first)",
        )
    ),
]
ContactRef = Annotated[
    str,
    StringConstraints(
        pattern=pattern_in_words(
            r"^(Email|Phone|Address):\S.*$",
            "a contact of the profile: Email:<Address>, Phone:<Number> or Address:<Type>",
        )
    ),
]
Scalar = str | int | float | bool

PreferenceStatus = Literal["OptIn", "OptOut"]
ConsentStatus = Literal["Granted", "Denied", "Revoked", "NotSet"]
CONTACT_REF_KINDS: tuple[str, ...] = ("Email", "Phone", "Address")


def contact_ref(kind: str, identity: str) -> str:
    """The reference to a contact used in consent Elements: ``contact_ref("Email", "a@x.io")``."""
    if kind not in CONTACT_REF_KINDS:
        raise ValueError(f"unknown contact kind {kind!r}; expected Email, Phone or Address")
    return f"{kind}:{identity}"


def _unique(items: Sequence[T], key: Callable[[T], Hashable], what: str) -> Sequence[T]:
    seen: dict[Hashable, int] = {}
    for index, item in enumerate(items):
        identity = key(item)
        if identity in seen:
            raise ValueError(f"items {seen[identity]} and {index} have the same {what}")
        seen[identity] = index
    return items


def _one_default(items: Sequence[Email | PhoneNumber | Address]) -> None:
    defaults = [index for index, item in enumerate(items) if item.is_default]
    if len(defaults) > 1:
        raise ValueError(f"items {defaults} all have IsDefault true; at most one may")


class PreferenceAttribute(WireModel):
    """A free key/value attached to a preference."""

    key: Text
    value: str


class Preference(WireModel):
    """An opt-in or opt-out for a program, optionally one of its filters, on one channel."""

    program: Text
    filter: Text | None = None
    channel: Text
    status: PreferenceStatus
    frequency: Text | None = None
    attributes: list[PreferenceAttribute] = Field(default_factory=list)
    is_archived: bool = False

    @field_validator("attributes")
    @classmethod
    def _unique_keys(cls, items: list[PreferenceAttribute]) -> list[PreferenceAttribute]:
        _unique(items, lambda a: a.key, "Key")
        return items


def _check_unique_preferences(items: list[Preference]) -> list[Preference]:
    _unique(items, lambda p: (p.program, p.filter, p.channel), "Program, Filter and Channel")
    return items


class Email(WireModel):
    """An email address of the customer, with the preferences that apply to it."""

    address: EmailAddress
    type: Text | None = None
    is_default: bool = False
    preferences: list[Preference] = Field(default_factory=list)

    _unique_preferences = field_validator("preferences")(_check_unique_preferences)


class PhoneNumber(WireModel):
    """A phone number of the customer, with the preferences that apply to it."""

    number: PhoneNumberText
    type: Text | None = None
    is_mobile: bool = False
    is_default: bool = False
    preferences: list[Preference] = Field(default_factory=list)

    _unique_preferences = field_validator("preferences")(_check_unique_preferences)


class Address(WireModel):
    """A postal address; ``Type`` (Home, Work, Billing…) identifies it within the profile."""

    type: Text
    line1: Text
    line2: Text | None = None
    city: Text | None = None
    state_province: Text | None = None
    postal_code: Annotated[str, StringConstraints(min_length=1, max_length=20)] | None = None
    country_code: CountryCode | None = None
    is_default: bool = False
    preferences: list[Preference] = Field(default_factory=list)

    _unique_preferences = field_validator("preferences")(_check_unique_preferences)


class AlternateId(WireModel):
    """An identifier of the customer in another system (loyalty number, CRM id…)."""

    type: Text
    value: Text


class Consent(WireModel):
    """A consent of one type, with the contacts (Elements) and filters it is associated with."""

    consent_type: Text
    consent_version: Text | None = None
    locale: Locale | None = None
    consent_status: ConsentStatus = "NotSet"
    consent_date: Timestamp | None = None
    elements: list[ContactRef] = Field(default_factory=list)
    filters: list[Text] = Field(default_factory=list)

    @field_validator("elements", "filters")
    @classmethod
    def _unique_values(cls, items: list[str]) -> list[str]:
        _unique(items, lambda value: value, "value")
        return items


class CustomField(WireModel):
    """A named value the account defines beyond the standard fields."""

    name: Text
    value: Scalar | None = None


class Group(WireModel):
    """Membership of a named group; an inactive membership is kept but deactivated."""

    name: Text
    is_active: bool = True


class CustomerName(WireModel):
    """The parts of the customer's name; each is optional but never empty."""

    prefix: PersonName | None = None
    first_name: PersonName | None = None
    middle_name: PersonName | None = None
    last_name: PersonName | None = None
    suffix: PersonName | None = None


class Edited(WireModel):
    """Audit stamps the service maintains (read-only)."""

    create_date: Timestamp | None = None
    created_by: str | None = None
    modified_date: Timestamp | None = None
    modified_by: str | None = None


class Profile(WireModel):
    """A customer profile as the REST API returns and accepts it.

    ``ProfileId`` and ``Edited`` are read-only: accepted in bodies (so GET → edit → PUT works) and
    ignored by the service.
    """

    profile_id: Annotated[int, Field(gt=0)] | None = None
    is_active: bool = True
    reason_code: Text | None = None
    customer_type: Text | None = None
    default_locale: Locale | None = None
    registration_status: Text | None = None
    customer_name: CustomerName | None = None
    emails: list[Email] = Field(default_factory=list)
    phone_numbers: list[PhoneNumber] = Field(default_factory=list)
    addresses: list[Address] = Field(default_factory=list)
    alternate_ids: list[AlternateId] = Field(default_factory=list)
    profile_preferences: list[Preference] = Field(default_factory=list)
    consents: list[Consent] = Field(default_factory=list)
    custom_fields: list[CustomField] = Field(default_factory=list)
    groups: list[Group] = Field(default_factory=list)
    tags: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]] = Field(
        default_factory=list
    )
    edited: Edited | None = None

    @field_validator("emails")
    @classmethod
    def _check_emails(cls, items: list[Email]) -> list[Email]:
        _unique(items, lambda e: e.address.lower(), "Address")
        _one_default(items)
        return items

    @field_validator("phone_numbers")
    @classmethod
    def _check_phones(cls, items: list[PhoneNumber]) -> list[PhoneNumber]:
        _unique(items, lambda p: p.number, "Number")
        _one_default(items)
        return items

    @field_validator("addresses")
    @classmethod
    def _check_addresses(cls, items: list[Address]) -> list[Address]:
        _unique(items, lambda a: a.type, "Type")
        _one_default(items)
        return items

    _unique_profile_preferences = field_validator("profile_preferences")(_check_unique_preferences)

    @field_validator("alternate_ids")
    @classmethod
    def _check_alternate_ids(cls, items: list[AlternateId]) -> list[AlternateId]:
        _unique(items, lambda a: a.type, "Type")
        return items

    @field_validator("consents")
    @classmethod
    def _check_consents(cls, items: list[Consent], info: ValidationInfo) -> list[Consent]:
        _unique(items, lambda c: c.consent_type, "ConsentType")
        # Contacts are declared before Consents, so they are validated and in info.data; when one
        # of those lists was invalid its own error is reported and the references are not checked.
        if not {"emails", "phone_numbers", "addresses"} <= info.data.keys():
            return items
        known = {contact_ref("Email", e.address) for e in info.data["emails"]}
        known |= {contact_ref("Phone", p.number) for p in info.data["phone_numbers"]}
        known |= {contact_ref("Address", a.type) for a in info.data["addresses"]}
        for index, consent in enumerate(items):
            for ref in consent.elements:
                if ref not in known:
                    raise ValueError(
                        f"item {index}: Element {ref!r} names no contact of the profile"
                    )
        return items

    @field_validator("custom_fields")
    @classmethod
    def _check_custom_fields(cls, items: list[CustomField]) -> list[CustomField]:
        _unique(items, lambda f: f.name, "Name")
        return items

    @field_validator("groups")
    @classmethod
    def _check_groups(cls, items: list[Group]) -> list[Group]:
        _unique(items, lambda g: g.name, "Name")
        return items

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, items: list[str]) -> list[str]:
        _unique(items, lambda tag: tag, "value")
        return items


class DeactivateRequest(WireModel):
    """Body of ``POST /profiles/{ProfileId}/deactivate``."""

    reason: Text | None = None


class ProfilePage(WireModel):
    """One page of ``GET /profiles``; pass ``NextCursor`` as ``cursor`` for the next one."""

    profiles: list[Profile] = Field(default_factory=list)
    next_cursor: str | None = None


# Request bodies the emulator validates strictly (unknown fields → 400); see models/_base.py.
if TYPE_CHECKING:
    StrictProfile = Profile
    StrictDeactivateRequest = DeactivateRequest
else:
    StrictProfile = strict_model(Profile)
    StrictDeactivateRequest = strict_model(DeactivateRequest)
