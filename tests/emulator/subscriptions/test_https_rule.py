"""The HTTPS rule for webhook URLs on a real emulator: a plain-http Url off loopback is a 400
naming the rule; loopback stays allowed; the account setting AllowHttpWebhooks lifts the rule."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.emulator.routes._api import assert_problem
from tests.emulator.subscriptions.conftest import body, create
from tests.helpers import free_port

REMOTE = "http://hooks.example.com/x"
# Not a loopback host by name, yet a handshake to it stays on this machine (and finds no
# listener): for the subscriptions that are accepted, so that no test sends anything off 127.0.0.1.
UNSPECIFIED = f"0.0.0.0:{free_port()}"


@pytest.fixture
def settings(api: httpx.Client) -> Iterator[httpx.Client]:
    yield api
    assert api.put("/settings/webhooks", json={}).status_code == 200  # back to the defaults


def _allow_http(api: httpx.Client, allowed: bool) -> None:
    current = api.get("/settings/webhooks").json()
    answer = api.put("/settings/webhooks", json={**current, "AllowHttpWebhooks": allowed})
    assert answer.status_code == 200, answer.text


def test_post_subscription_plain_http_off_loopback_is_400_naming_the_rule(
    api: httpx.Client,
) -> None:
    problem = assert_problem(api.post("/subscriptions", json=body(REMOTE)), 400)

    [error] = problem["errors"]
    assert error["field"] == "Url"
    assert "HTTPS is mandatory" in error["message"]
    assert "AllowHttpWebhooks" in error["message"]
    assert "hooks.example.com is not a loopback host" in error["message"]
    assert [s["Url"] for s in api.get("/subscriptions").json()["Subscriptions"]].count(REMOTE) == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/in",
        "http://127.8.9.10:9/in",
        "http://localhost:9/in",
        "http://[::1]:9/in",
    ],
)
def test_post_subscription_plain_http_to_loopback_is_accepted(api: httpx.Client, url: str) -> None:
    created = create(api, body(url))

    assert created["Url"] == url
    assert api.delete(f"/subscriptions/{created['Id']}").status_code == 204


def test_post_subscription_https_off_loopback_is_accepted(api: httpx.Client) -> None:
    created = create(api, body(f"https://{UNSPECIFIED}/x"))

    assert api.delete(f"/subscriptions/{created['Id']}").status_code == 204


def test_allow_http_webhooks_true_lifts_the_rule_and_false_restores_it(
    settings: httpx.Client,
) -> None:
    url = f"http://{UNSPECIFIED}/x"
    _allow_http(settings, True)
    created = create(settings, body(url))
    assert created["Url"] == url
    assert settings.delete(f"/subscriptions/{created['Id']}").status_code == 204

    _allow_http(settings, False)
    [error] = assert_problem(settings.post("/subscriptions", json=body(url)), 400)["errors"]
    assert "0.0.0.0 is not a loopback host" in error["message"]


def test_put_subscription_to_plain_http_off_loopback_is_400(api: httpx.Client) -> None:
    payload = body(f"https://{UNSPECIFIED}/x")
    created = create(api, payload)

    answer = api.put(f"/subscriptions/{created['Id']}", json={**payload, "Url": REMOTE})

    [error] = assert_problem(answer, 400)["errors"]
    assert (error["field"], "HTTPS is mandatory" in error["message"]) == ("Url", True)
    assert api.get(f"/subscriptions/{created['Id']}").json()["Url"] == payload["Url"]
    assert api.delete(f"/subscriptions/{created['Id']}").status_code == 204


def test_put_subscription_keeping_a_stored_plain_http_url_is_accepted(
    settings: httpx.Client,
) -> None:
    # Stored while the account allowed it (as before the rule): pausing it is not refused.
    _allow_http(settings, True)
    payload = body(f"http://{UNSPECIFIED}/x")
    created = create(settings, payload)
    _allow_http(settings, False)

    answer = settings.put(f"/subscriptions/{created['Id']}", json={**payload, "State": "Paused"})

    assert answer.status_code == 200, answer.text
    assert answer.json()["State"] == "Paused"
    assert settings.delete(f"/subscriptions/{created['Id']}").status_code == 204


def test_settings_allow_http_webhooks_must_be_a_json_boolean(settings: httpx.Client) -> None:
    current = settings.get("/settings/webhooks").json()
    assert current["AllowHttpWebhooks"] is False

    answer = settings.put("/settings/webhooks", json={**current, "AllowHttpWebhooks": "yes"})

    [error] = assert_problem(answer, 400)["errors"]
    assert error["field"] == "AllowHttpWebhooks"
    assert settings.get("/settings/webhooks").json() == current
