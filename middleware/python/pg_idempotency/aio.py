"""The course of core on an event loop, without blocking it and without holding a thread
while a duplicate waits.

With an asyncio connection (psycopg 3's AsyncConnection) every step is awaited, and
Options.wait waits in the server: a statement that holds no thread.  With a blocking one
(psycopg 3's Connection, psycopg2's), each statement runs in a worker thread (anyio's),
and Options.wait asks again after pauses on the event loop instead: the thread is given
back between statements, so that waiting duplicates cannot take every thread the request
they wait for needs to finish.
"""
import inspect
from typing import Any, Awaitable, Callable, Optional, Tuple, cast

import anyio
import anyio.to_thread

from .core import (CHECKPOINT_SQL, Commit, Context, Course, Driven, Options, Query, Request,
                   Response, Run, Sleep, Step, course, run_step)


def is_async(conn: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(conn, "commit", None))


class AsyncContext(Context):
    """The handler's context on an asyncio connection: `checkpoint` is awaited."""

    async def checkpoint(self, recovery_point: Optional[str]) -> None:  # type: ignore[override]
        await self.conn.execute(CHECKPOINT_SQL,
                                (self.scope, self.key, recovery_point, self.attempt),
                                prepare=False)
        await self.conn.commit()


async def run_async_step(conn: Any, step: Step) -> Any:
    """Performs a database step: awaited on an asyncio connection, else in a thread."""
    if not is_async(conn):
        return await anyio.to_thread.run_sync(run_step, conn, step)
    if isinstance(step, Query):
        cur = await conn.execute(step.sql, step.params, prepare=False)  # see takes_prepare
        return await cur.fetchone()
    return await (conn.commit() if isinstance(step, Commit) else conn.rollback())


async def outcome_async(perform: Callable[[Step], Awaitable[Any]],
                        step: Step) -> Tuple[Any, Optional[Exception]]:
    try:
        return await perform(step), None
    except Exception as failure:  # noqa: BLE001 - handed to the course
        return None, failure


async def drive_async(steps: Course, perform: Callable[[Step], Awaitable[Any]]) -> Response:
    """core.drive, awaiting each step."""
    run = Driven(steps)
    while run.step is not None:
        run.resume(*await outcome_async(perform, run.step))
    return cast(Response, run.answer)


async def handle_async(conn: Any, request: Request,
                       handler: Callable[[Context], Awaitable[Response]],
                       options: "Options[Any]" = Options(), scope: str = "") -> Response:
    """core.handle on an event loop: `conn` is an asyncio connection or a blocking one
    (see above); `handler` is awaited with an AsyncContext or a Context accordingly."""
    polls = not is_async(conn)
    context_type = Context if polls else AsyncContext

    async def perform(step: Step) -> Any:
        if isinstance(step, Run):
            return await handler(context_type(conn, step))
        if isinstance(step, Sleep):
            return await anyio.sleep(step.seconds)
        return await run_async_step(conn, step)

    return await drive_async(course(request, scope, options, polls), perform)
