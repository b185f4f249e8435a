"""Customer profiles over the REST API (docs/api.md): ``/profiles``.

Profiles travel as the API returns them (PascalCase dicts), so ``-o json`` prints them unchanged
and fields a newer service adds are kept. Searches are paged: ``search`` returns one page,
``search_all`` follows ``NextCursor`` to the end.

    >>> profiles = ProfilesApi(client)
    >>> created = profiles.create({"Emails": [{"Address": "ada@example.com"}]})
    >>> profiles.patch(created["ProfileId"], {"CustomerName": {"FirstName": "Ada"}})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prefctl.api.client import ApiClient, Page, Resource, all_items, as_page
from prefctl.api.patches import content_type_of

__all__ = ["ProfileQuery", "ProfilesApi"]


@dataclass(frozen=True)
class ProfileQuery:
    """Search criteria of ``GET /profiles`` (all optional, combined with AND)."""

    email: str | None = None
    phone: str | None = None
    alternate_id_type: str | None = None
    alternate_id: str | None = None

    def params(self) -> dict[str, str | None]:
        return {
            "email": self.email,
            "phone": self.phone,
            "alternateIdType": self.alternate_id_type,
            "alternateId": self.alternate_id,
        }


class ProfilesApi:
    """Operations on the account's customer profiles."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def create(self, body: Mapping[str, Any]) -> Resource:
        """POST a new profile (the service assigns ProfileId); event profile.created."""
        return self.client.resource("POST", "/profiles", body=dict(body))

    def get(self, profile_id: int) -> Resource:
        return self.client.resource("GET", f"/profiles/{profile_id}")

    def search(
        self, query: ProfileQuery, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        """One page of profiles matching ``query``."""
        params = {**query.params(), "limit": limit, "cursor": cursor}
        return as_page(self.client.get("/profiles", params), "Profiles", "GET /profiles")

    def search_all(
        self, query: ProfileQuery, *, page_size: int | None = None
    ) -> Iterator[Resource]:
        """Every matching profile, page after page."""
        return all_items(lambda cursor: self.search(query, limit=page_size, cursor=cursor))

    def replace(self, profile_id: int, body: Mapping[str, Any]) -> Resource:
        """PUT the whole profile; event profile.replaced."""
        return self.client.resource("PUT", f"/profiles/{profile_id}", body=dict(body))

    def patch(self, profile_id: int, patch: dict[str, Any] | list[dict[str, Any]]) -> Resource:
        """PATCH with a JSON Patch (a list) or a merge patch (an object), told apart by shape."""
        return self.client.resource(
            "PATCH", f"/profiles/{profile_id}", body=patch, content_type=content_type_of(patch)
        )

    def deactivate(self, profile_id: int, reason: str | None = None) -> Resource:
        body = {"Reason": reason} if reason else {}
        return self.client.resource("POST", f"/profiles/{profile_id}/deactivate", body=body)

    def reactivate(self, profile_id: int) -> Resource:
        return self.client.resource("POST", f"/profiles/{profile_id}/reactivate")

    def delete(self, profile_id: int, reason_code: str | None = None) -> None:
        self.client.call("DELETE", f"/profiles/{profile_id}", params={"reasonCode": reason_code})
