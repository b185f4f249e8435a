"""A simulation scenario: the TOML file of ``prefctl simulate``, validated in one step.

``load_scenario(path)`` reads the file and returns a ``Scenario`` or raises one ``UsageError``
naming the file, the line and the key: an unknown key (with the closest known one), a wrong type,
a setting out of its range (``models.settings.SETTING_RANGES``), an impossible window. Nothing
runs before the whole file is accepted. The format is documented in ``docs/simulate.md``::

    seed = 7
    [settings]
    MaxDeliveryAttempts = 30
    [load]
    events_per_minute = 70
    duration_minutes = 1440
    event_mix = { "profile.updated" = 3, "contacts.email.added" = 1 }
    [endpoint]
    status_mix = { 200 = 0.99, 503 = 0.01 }
    latency_ms = { distribution = "lognormal", p50 = 80, p99 = 900 }
    [[endpoint.outages]]
    start_minute = 600
    end_minute = 720
    status = "connection_error"

Without ``[[subscriptions]]`` there is one subscription, ``simulated``, selecting every type of the
mix, with the ``[endpoint]`` model. Each ``[[subscriptions]]`` entry has a name, the event types it
selects, alerts, and an ``endpoint`` table whose keys replace those of ``[endpoint]`` one by one.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, cast

from prefctl.errors import UsageError
from prefctl.private_files import os_reason
from prefctl.sim._reader import REQUIRED, Reader, Table
from prefctl.sim._toml_lines import KeyLines, KeyPath

__all__ = [
    "DEFAULT_START",
    "EndpointModel",
    "Latency",
    "LoadModel",
    "LoadWindow",
    "Scenario",
    "StatusKey",
    "SubscriptionModel",
    "Window",
    "load_scenario",
    "parse_scenario",
]

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_SUBSCRIPTION = "simulated"
DEFAULT_RECIPIENTS = ("alerts@example.com",)
MAX_DURATION_MINUTES = 7 * 24 * 60
MAX_EVENTS = 2_000_000

# An attempt's fate: an HTTP status, or no answer of one of two kinds.
StatusKey = int | Literal["timeout", "connection_error"]
Distribution = Literal["fixed", "uniform", "lognormal"]


@dataclass(frozen=True, slots=True)
class Latency:
    """Response time in ms: ``fixed`` (low), ``uniform`` (low..high) or ``lognormal`` (p50 =
    low, p99 = high)."""

    distribution: Distribution
    low_ms: float
    high_ms: float


@dataclass(frozen=True, slots=True)
class Window:
    """A period of the run, in minutes from the start, that changes the endpoint's answers.

    An outage answers ``status_mix`` (one status) always; a slow period changes the latency; an
    override may change either."""

    kind: Literal["outage", "slow", "override"]
    start_minute: float
    end_minute: float
    status_mix: tuple[tuple[StatusKey, float], ...] | None = None
    latency: Latency | None = None

    def covers(self, minute: float) -> bool:
        return self.start_minute <= minute < self.end_minute


@dataclass(frozen=True, slots=True)
class EndpointModel:
    """How one subscription's endpoint answers; weights of ``status_mix`` sum to 1."""

    status_mix: tuple[tuple[StatusKey, float], ...]
    latency: Latency
    outages: tuple[Window, ...] = ()
    slow_periods: tuple[Window, ...] = ()
    windows: tuple[Window, ...] = ()


@dataclass(frozen=True, slots=True)
class SubscriptionModel:
    name: str
    event_types: tuple[str, ...]
    alerts: bool
    recipients: tuple[str, ...]
    endpoint: EndpointModel


@dataclass(frozen=True, slots=True)
class LoadWindow:
    """A period with another event rate (a burst, a lull)."""

    start_minute: float
    end_minute: float
    events_per_minute: float


@dataclass(frozen=True, slots=True)
class LoadModel:
    events_per_minute: float
    duration_minutes: float
    event_mix: tuple[tuple[str, float], ...]
    arrival: Literal["poisson", "even"] = "poisson"
    windows: tuple[LoadWindow, ...] = ()

    def rate_at(self, minute: float) -> float:
        for window in self.windows:
            if window.start_minute <= minute < window.end_minute:
                return window.events_per_minute
        return self.events_per_minute


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario; ``settings`` holds all eight settings (defaults filled in)."""

    name: str
    description: str | None
    seed: int
    start: datetime
    settings: dict[str, int]
    load: LoadModel
    subscriptions: tuple[SubscriptionModel, ...]

    def with_seed(self, seed: int | None) -> Scenario:
        """The same scenario under another seed (``--seed``)."""
        return self if seed is None else replace(self, seed=seed)

    @property
    def horizon_minutes(self) -> float:
        """The last minute anything can still be attempted: the load, then the TTL."""
        return self.load.duration_minutes + self.settings["EventTimeToLiveMinutes"]


def load_scenario(path: Path) -> Scenario:
    """Read and validate the scenario at ``path`` (one ``UsageError`` naming line and key)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read the scenario {path}: {os_reason(exc)}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the scenario is not UTF-8 text") from None
    return parse_scenario(text, source=str(path))


def parse_scenario(text: str, *, source: str = "scenario.toml") -> Scenario:
    """Validate a scenario's TOML text; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib ends its message with "(at line N, column M)": put the line up front.
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        where = f"{source}:{found.group(1)}" if found else source
        raise UsageError(f"{where}: not valid TOML: {exc}") from None
    reader = Reader(source, KeyLines(text))
    return _scenario(reader, Table(data, ()), Path(source).stem)


# -- sections --------------------------------------------------------------------------------------
_TOP = ("name", "description", "seed", "start", "settings", "load", "endpoint", "subscriptions")
_LOAD = ("events_per_minute", "duration_minutes", "event_mix", "arrival", "windows")
_ENDPOINT = ("status_mix", "latency_ms", "outages", "slow_periods", "windows")
_SUBSCRIPTION = ("name", "event_types", "alerts", "recipients", "endpoint")


def _scenario(reader: Reader, top: Table, stem: str) -> Scenario:
    reader.known_keys(top, _TOP)
    settings = _settings(reader, reader.table(top, "settings"))
    load = _load(reader, reader.table(top, "load"))
    horizon = load.duration_minutes + settings["EventTimeToLiveMinutes"]
    endpoint = reader.table(top, "endpoint")
    reader.known_keys(endpoint, _ENDPOINT)
    entries = reader.array_of_tables(top, "subscriptions")
    if entries:
        subscriptions = tuple(_subscription(reader, e, endpoint, load, horizon) for e in entries)
        names = [s.name for s in subscriptions]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise reader.error(
                    (*entries[index].path, "name"), f"subscription name {name!r} is used twice"
                )
    else:
        model = _endpoint(reader, endpoint, Table({}, endpoint.path), load, horizon)
        types = tuple(event_type for event_type, _ in load.event_mix)
        subscriptions = (
            SubscriptionModel(DEFAULT_SUBSCRIPTION, types, True, DEFAULT_RECIPIENTS, model),
        )
    start = reader.value(top, "start", datetime, default=DEFAULT_START)
    if start.tzinfo is None:
        raise reader.error(("start",), "give a time zone, e.g. 2026-01-01T00:00:00Z")
    return Scenario(
        name=reader.string(top, "name", default=stem),
        description=reader.optional_string(top, "description"),
        seed=reader.integer(top, "seed", default=1),
        start=start.astimezone(UTC),
        settings=settings,
        load=load,
        subscriptions=subscriptions,
    )


def _settings(reader: Reader, table: Table) -> dict[str, int]:
    from prefctl.models.setting_ranges import SETTING_RANGES

    reader.known_keys(table, tuple(SETTING_RANGES))
    settings = {name: limits.default for name, limits in SETTING_RANGES.items()}
    for name in table.data:
        settings[name] = reader.integer(table, name, default=settings[name])
    for name in table.data:
        problem = SETTING_RANGES[name].check(settings[name], settings)
        if problem:
            raise reader.error((*table.path, name), problem.removeprefix(f"{name} "))
    return settings


def _load(reader: Reader, table: Table) -> LoadModel:
    reader.known_keys(table, _LOAD)
    rate = reader.number(table, "events_per_minute", above=0)
    duration = reader.number(table, "duration_minutes", above=0, at_most=MAX_DURATION_MINUTES)
    mix = _event_mix(reader, table)
    arrival = cast(
        "Literal['poisson', 'even']",
        reader.choice(table, "arrival", ("poisson", "even"), default="poisson"),
    )
    windows = []
    for entry in reader.array_of_tables(table, "windows"):
        reader.known_keys(entry, ("start_minute", "end_minute", "events_per_minute"))
        start, end = reader.span(entry, duration)  # within the load
        entry_rate = reader.number(entry, "events_per_minute", at_least=0)
        windows.append(LoadWindow(start, end, entry_rate))
    reader.no_overlap([(w.start_minute, w.end_minute) for w in windows], table, "windows")
    load = LoadModel(rate, duration, mix, arrival, tuple(windows))
    expected = sum(
        w.events_per_minute * (w.end_minute - w.start_minute) for w in load.windows
    ) + rate * (duration - sum(w.end_minute - w.start_minute for w in load.windows))
    if expected > MAX_EVENTS:
        # A huge rate times the duration may be a 300-digit number, or overflow to inf.
        about = f"about {expected:,.0f} events" if expected < 1e12 else "far more events"
        raise reader.error(
            (*table.path, "events_per_minute"), f"{about}; a run holds at most {MAX_EVENTS:,}"
        )
    return load


def _event_mix(reader: Reader, table: Table) -> tuple[tuple[str, float], ...]:
    from prefctl.webhooks.catalog import is_event_type

    if "event_mix" not in table.data:
        return (("profile.updated", 1.0),)
    mix = reader.table(table, "event_mix")
    for event_type in mix.data:
        if not is_event_type(event_type):
            raise reader.unknown((*mix.path, event_type), "event type", _catalog_names())
    return reader.weights(mix, str)


def _catalog_names() -> tuple[str, ...]:
    from prefctl.webhooks.catalog import ALL_TYPES

    return tuple(t.name for t in ALL_TYPES)


def _subscription(
    reader: Reader, entry: Table, default: Table, load: LoadModel, horizon: float
) -> SubscriptionModel:
    from prefctl.webhooks.catalog import is_event_type

    reader.known_keys(entry, _SUBSCRIPTION)
    name = reader.string(entry, "name")
    if "event_types" in entry.data:
        types = reader.string_list(entry, "event_types")
        for index, event_type in enumerate(types):
            if not is_event_type(event_type):
                path: KeyPath = (*entry.path, "event_types", index)
                raise reader.unknown(path, "event type", _catalog_names())
    else:
        types = [event_type for event_type, _ in load.event_mix]
    recipients = reader.string_list(entry, "recipients") if "recipients" in entry.data else None
    own = reader.table(entry, "endpoint")
    reader.known_keys(own, _ENDPOINT)
    return SubscriptionModel(
        name=name,
        event_types=tuple(dict.fromkeys(types)),
        alerts=reader.value(entry, "alerts", bool, default=True),
        recipients=DEFAULT_RECIPIENTS if recipients is None else tuple(recipients),
        endpoint=_endpoint(reader, default, own, load, horizon),
    )


def _endpoint(
    reader: Reader, default: Table, own: Table, load: LoadModel, horizon: float
) -> EndpointModel:
    """The endpoint model: each key from ``own`` when it has it, else from ``default``."""

    def source(key: str) -> Table:
        return own if key in own.data else default

    mix_table = source("status_mix")
    status_mix = (
        _status_mix(reader, reader.table(mix_table, "status_mix"))
        if "status_mix" in mix_table.data
        else ((200, 1.0),)
    )
    latency = _latency(reader, source("latency_ms"), default=Latency("fixed", 50.0, 50.0))
    assert latency is not None
    duration = load.duration_minutes
    outages = []
    for entry in reader.array_of_tables(source("outages"), "outages"):
        reader.known_keys(entry, ("start_minute", "end_minute", "status"))
        start, end = reader.span(entry, duration, horizon)
        status = _status(reader, entry, "status", reader.raw(entry, "status", default=503))
        outages.append(Window("outage", start, end, status_mix=((status, 1.0),)))
    slow = []
    for entry in reader.array_of_tables(source("slow_periods"), "slow_periods"):
        reader.known_keys(entry, ("start_minute", "end_minute", "latency_ms"))
        start, end = reader.span(entry, duration, horizon)
        if "latency_ms" not in entry.data:
            raise reader.error((*entry.path, "latency_ms"), "a slow period needs latency_ms")
        slow.append(Window("slow", start, end, latency=_latency(reader, entry, default=None)))
    overrides = []
    for entry in reader.array_of_tables(source("windows"), "windows"):
        reader.known_keys(entry, ("start_minute", "end_minute", "status_mix", "latency_ms"))
        start, end = reader.span(entry, duration, horizon)
        if "status_mix" not in entry.data and "latency_ms" not in entry.data:
            raise reader.error(entry.path, "a window needs status_mix or latency_ms, or both")
        mix = (
            _status_mix(reader, reader.table(entry, "status_mix"))
            if "status_mix" in entry.data
            else None
        )
        window_latency = _latency(reader, entry, default=None)
        overrides.append(Window("override", start, end, mix, window_latency))
    for key, windows in (("outages", outages), ("slow_periods", slow), ("windows", overrides)):
        spans = [(w.start_minute, w.end_minute) for w in windows]
        reader.no_overlap(spans, source(key), key)
    return EndpointModel(status_mix, latency, tuple(outages), tuple(slow), tuple(overrides))


def _status_mix(reader: Reader, table: Table) -> tuple[tuple[StatusKey, float], ...]:
    keys = {key: _status(reader, table, key, key) for key in table.data}
    return tuple((keys[key], weight) for key, weight in reader.weights(table, str))


def _status(reader: Reader, table: Table, key: str, value: object) -> StatusKey:
    """An HTTP status (100–599, as a number or a digit string), "timeout" or
    "connection_error"."""
    if value in ("timeout", "connection_error"):
        return value
    status: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        status = value
    elif isinstance(value, str) and value.isdigit():
        status = int(value)
    if status is None or not 100 <= status <= 599:
        raise reader.error(
            (*table.path, key),
            f"{value!r} is not a status: use an HTTP status 100-599, "
            '"timeout" or "connection_error"',
        )
    return status


def _latency(reader: Reader, table: Table, *, default: Latency | None) -> Latency | None:
    if "latency_ms" not in table.data:
        return default
    raw = table.data["latency_ms"]
    path = (*table.path, "latency_ms")
    if not isinstance(raw, dict):
        fixed = reader.number(table, "latency_ms", at_least=0)
        return Latency("fixed", fixed, fixed)
    spec = Table(raw, path)
    kind = reader.choice(spec, "distribution", ("fixed", "uniform", "lognormal"), default=REQUIRED)
    if kind == "fixed":
        reader.known_keys(spec, ("distribution", "value"))
        value = reader.number(spec, "value", at_least=0)
        return Latency("fixed", value, value)
    if kind == "uniform":
        reader.known_keys(spec, ("distribution", "min", "max"))
        low = reader.number(spec, "min", at_least=0)
        high = reader.number(spec, "max", at_least=low)
        return Latency("uniform", low, high)
    reader.known_keys(spec, ("distribution", "p50", "p99"))
    p50 = reader.number(spec, "p50", above=0)
    p99 = reader.number(spec, "p99", at_least=p50)
    return Latency("lognormal", p50, p99)
