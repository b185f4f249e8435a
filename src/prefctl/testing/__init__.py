"""prefctl's pytest plugin, and helpers for testing a webhook receiver of one's own.

Installed with prefctl and loaded by pytest through the ``pytest11`` entry point ``prefctl``
(``-p no:prefctl`` turns it off). Loading it imports nothing heavy: the emulator, the receiver
and httpx are imported when a test first asks for a fixture. docs/testing.md is the user's guide.

Fixtures:

- ``prefctl_emulator`` (session): a throwaway emulator on a free 127.0.0.1 port in a temporary
  data dir; ``api_url``, ``token_url``, ``client_id``, ``client_secret``, ``service_client_id``,
  ``hashkey``, ``signature_user_id``, ``token()``, ``client``, ``subscribe()``, ``trigger()``,
  ``settings()``.
- ``prefctl_receiver`` (function): ``prefctl receive`` on a free port, verifying with the
  emulator's account; ``url``, ``events``, ``wait_for()``, ``fail_next()``.

Options: ``--prefctl-time-scale X`` (or ``@pytest.mark.prefctl(time_scale=X)`` on a test, class or
module, which wins), ``--prefctl-port``, ``--prefctl-data-dir``.

Helpers: ``sign_headers(body, hashkey=…, client_id=…, user_id=…)`` and ``validation_request()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from prefctl.testing._emulator import EmulatorOptions, PrefctlEmulator
    from prefctl.testing._receiver import PrefctlReceiver
    from prefctl.testing._signing import sign_headers, validation_request

__all__ = ["prefctl_emulator", "prefctl_receiver", "sign_headers", "validation_request"]

MARKER = "prefctl"
_HELPERS = ("sign_headers", "validation_request")
_T = TypeVar("_T")


def __getattr__(name: str) -> Any:
    # The helpers load on first use: the plugin's load stays free of what they import.
    if name in _HELPERS:
        from prefctl.testing import _signing

        return getattr(_signing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- pytest hooks --------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("prefctl", "prefctl emulator and receiver fixtures")
    group.addoption(
        "--prefctl-time-scale",
        type=float,
        default=None,
        metavar="X",
        help="run the prefctl_emulator's delivery rules X times faster (backoff, timeouts, TTL); "
        "@pytest.mark.prefctl(time_scale=X) wins for its tests. Default 1.",
    )
    group.addoption(
        "--prefctl-port",
        type=int,
        default=0,
        metavar="PORT",
        help="the port of prefctl_emulator on 127.0.0.1 (default: a free port).",
    )
    group.addoption(
        "--prefctl-data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep prefctl_emulator's data in DIR, to look at it after the run "
        "(default: a temporary folder).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(time_scale=X): run the prefctl_emulator of these tests with its delivery rules "
        "X times faster",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``prefctl(time_scale=X)`` gets the session emulator of that time scale: the
    session fixture is parametrized by it, so pytest keeps one emulator per scale and groups the
    tests that share one."""
    if "prefctl_emulator" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    unknown = sorted(set(marker.kwargs) - {"time_scale"})
    if marker.args or unknown:
        given = ", ".join([*map(repr, marker.args), *unknown])
        pytest.fail(f"@pytest.mark.prefctl takes time_scale=X only, not {given}", pytrace=False)
    scale = marker.kwargs.get("time_scale")
    if scale is None:
        return
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        pytest.fail(
            f"@pytest.mark.prefctl: time_scale must be a number, not {scale!r}", pytrace=False
        )
    metafunc.parametrize(
        "prefctl_emulator",
        [float(scale)],
        indirect=True,
        scope="session",
        ids=[f"time_scale={scale:g}"],
    )


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def prefctl_emulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrefctlEmulator]:
    """A throwaway emulator for the session (one per time scale), stopped and its folder
    removed at the end; see ``prefctl.testing._emulator.PrefctlEmulator``."""
    from prefctl.testing._emulator import start_emulator

    options = _options(request)
    workdir = tmp_path_factory.mktemp("prefctl-emulator")
    with _sigterm_as_interrupt():
        emulator = _started("prefctl_emulator", lambda: start_emulator(options, workdir))
        try:
            yield emulator
        finally:
            emulator.close()
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)  # --prefctl-data-dir lies outside: it stays
            _unlink_current_link(workdir)


@pytest.fixture
def prefctl_receiver(
    prefctl_emulator: PrefctlEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrefctlReceiver]:
    """``prefctl receive`` on a free port for this test; its subscriptions are deleted at the
    end. See ``prefctl.testing._receiver.PrefctlReceiver``."""
    from prefctl.testing._receiver import start_receiver

    workdir = tmp_path_factory.mktemp("prefctl-receiver")
    receiver = _started("prefctl_receiver", lambda: start_receiver(prefctl_emulator, workdir))
    try:
        yield receiver
    finally:
        receiver.close()
        prefctl_emulator.unsubscribe_url(receiver.url)


def _unlink_current_link(workdir: Path) -> None:
    """Remove pytest's ``prefctl-emulatorcurrent`` link to the folder just removed (pytest removes
    such dead links itself only when the fixtures were torn down before the session ended, not
    after an interrupt)."""
    link = workdir.with_name(f"{workdir.name.rstrip('0123456789')}current")
    if link.is_symlink() and link.readlink() == workdir:
        link.unlink(missing_ok=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what a CI system sends to a cancelled job), raised where the run was, as Ctrl-C
    is: pytest stops, tears its fixtures down (servers stopped, temporary folders removed) and
    exits 2, "interrupted"."""


def _on_sigterm(signum: int, frame: object) -> None:
    import signal

    # A second SIGTERM while the fixtures are torn down is ignored: the clean-up finishes.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated("SIGTERM")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM interrupts the run as Ctrl-C does, unless the run already
    handles SIGTERM itself (its handler is kept) or this is not the main thread (where Python
    runs signal handlers)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(
        signal.SIGTERM
    ) not in (signal.SIG_DFL, None):
        yield
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) in (_on_sigterm, signal.SIG_IGN):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _options(request: pytest.FixtureRequest) -> EmulatorOptions:
    from prefctl.testing._emulator import EmulatorOptions

    config = request.config
    scale = getattr(request, "param", None)
    if scale is None:
        scale = config.getoption("prefctl_time_scale")
    return EmulatorOptions(
        time_scale=1.0 if scale is None else float(scale),
        port=int(config.getoption("prefctl_port")),
        data_dir=config.getoption("prefctl_data_dir"),
    )


def _started(fixture: str, start: Callable[[], _T]) -> _T:
    """``start()``, or the test fails with the server's own one-line error (no traceback)."""
    from prefctl.errors import PrefctlError

    try:
        return start()
    except PrefctlError as exc:
        hint = f"; {exc.hint}" if exc.hint else ""
        reason = f"{fixture} could not start: {exc}{hint}"
    # Outside the except block: the report shows this one line, not the error it replaces.
    pytest.fail(reason, pytrace=False)
