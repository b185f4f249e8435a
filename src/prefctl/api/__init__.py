"""The REST client of the service (docs/api.md): one ``httpx.Client``, one class per resource.

    client.py         ApiClient: base URL, bearer auth, TLS, timeouts, paging helpers
    problems.py       error answers (RFC 9457 problem+json) → PrefctlError with its exit code
    profiles.py       ProfilesApi: create, get, search (paged), replace, patch, lifecycle
    patches.py        JSON Patch / merge patch bodies: shape detection, ``--set`` paths, diffs
    shapes.py         fields of an answer read by their shape: lenient for tables, strict for ids
    subscriptions.py  SubscriptionsApi and the wait for provisioning
    settings.py       SettingsApi and the range check made before sending
    programs.py       ProgramsApi
    events.py         EventsApi: the event history, paged
    imports.py        ImportsApi: initiate, stage in chunks, execute, wait for the result
    trigger.py        perform the change that yields a given event type (trigger_recipes.py)

    >>> with ApiClient.for_profile(profile, clock=SystemClock()) as client:
    ...     ProfilesApi(client).get(1001)["CustomerName"]

Like ``prefctl.auth``, this package imports nothing itself: import the submodule you need.
"""
