"""The bulk imports an emulator is running: one task each on the server's event loop, stepping
the import through the writer process (``routes/imports.py`` starts them and resumes those a stop
cut short)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from prefctl.clock import Clock
from prefctl.emulator.group_writer import GroupWriter, WriterProcessError
from prefctl.store import imports as store
from prefctl.store.timestamps import epoch

__all__ = ["MAX_LOST_STEPS", "ImportRuns"]

log = logging.getLogger("prefctl.emulator.routes.imports")

# Steps whose writer process died before answering, in a row, before the import is marked Failed.
MAX_LOST_STEPS = 3


class ImportRuns:
    """The imports this emulator is running, one task each on its event loop (never two for one
    import). Only touched from that loop."""

    def __init__(self, writer: Callable[[], GroupWriter], clock: Clock) -> None:
        self._writer = writer
        self._clock = clock
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}

    def start(self, account: str, import_id: int) -> bool:
        """Run the import in the background unless it is running already."""
        key = (account, import_id)
        if key in self._tasks:
            return False
        task = asyncio.get_running_loop().create_task(
            self._run(account, import_id), name=f"prefctl-import-{import_id}"
        )
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))
        return True

    async def stop(self) -> None:
        """Cancel the runs (between two steps: a step handed to the writer process completes
        or not at all) and wait for them."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, account: str, import_id: int) -> None:
        writer = self._writer()
        lost = 0
        while True:
            step = store.ImportStep(account, import_id, epoch(self._clock.now()))
            try:
                state = await writer.run(step)
            except WriterProcessError as exc:
                lost += 1
                if lost < MAX_LOST_STEPS:
                    log.warning(
                        "import %s of %s: %s; running the step again", import_id, account, exc
                    )
                    continue
                await self._fail(account, import_id, exc)
                return
            except Exception as exc:
                await self._fail(account, import_id, exc)
                return
            lost = 0
            if state not in ("Queued", "Processing"):
                return

    async def _fail(self, account: str, import_id: int, exc: Exception) -> None:
        log.error("import %s of %s failed: %s", import_id, account, store.failure_reason(exc))
        fail = functools.partial(
            store.fail_import,
            account=account,
            import_id=import_id,
            error=store.failure_reason(exc),
            now=epoch(self._clock.now()),
        )
        try:
            await self._writer().run(fail)
        except Exception:
            # It stays Processing, to be resumed by the next start or execute.
            log.exception("import %s of %s could not be marked Failed", import_id, account)
