"""The course of core on an event loop, without blocking it and without holding a thread
while a duplicate waits.

With an asyncio connection (psycopg 3's AsyncConnection) every step is awaited, and
Options.wait waits in the server: a statement that holds no thread.  With a blocking one
(psycopg 3's Connection, psycopg2's), the statements run in a worker thread (anyio's), and
Options.wait asks again after pauses on the event loop instead: the thread is given back
while it pauses, so that waiting duplicates cannot take every thread the request they wait
for needs to finish.
"""
import inspect
from typing import Any, Awaitable, Callable, Optional, Tuple, cast

import anyio
import anyio.to_thread

from .core import (Commit, Context, Driven, Options, Query, Request, Response, Run, Sleep, Step,
                   checkpoint_query, course, run_statements, telling)


def is_async(conn: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(conn, "commit", None))


class AsyncContext(Context):
    """The handler's context on an asyncio connection: `checkpoint` is awaited."""

    async def checkpoint(self, recovery_point: Optional[str]) -> None:  # type: ignore[override]
        step = checkpoint_query(self.scope, self.key, recovery_point, self.attempt)
        await self.conn.execute(step.sql, step.params, prepare=False)
        await self.conn.commit()
        self.recovery_point = recovery_point


async def run_async_step(conn: Any, step: Step) -> Any:
    """Performs a database step on an asyncio connection."""
    if isinstance(step, Query):
        cur = await conn.execute(step.sql, step.params, prepare=False)  # see takes_prepare
        return await cur.fetchone()
    return await (conn.commit() if isinstance(step, Commit) else conn.rollback())


async def outcome_async(perform: Callable[..., Awaitable[Any]],
                        *args: Any) -> Tuple[Any, Optional[Exception]]:
    """core.outcome, awaited."""
    try:
        return await perform(*args), None
    except Exception as failure:  # noqa: BLE001 - handed to the course
        return None, failure


async def handle_async(conn: Any, request: Request,
                       handler: Callable[[Context], Awaitable[Response]],
                       options: "Options[Any]" = Options(), scope: str = "",
                       native: Any = None) -> Response:
    """core.handle on an event loop: `conn` is an asyncio connection or a blocking one
    (see above); `handler` is awaited with an AsyncContext or a Context accordingly."""
    blocking = not is_async(conn)
    run = Driven(telling(course(request, scope, options, polls=blocking), options, native,
                         request.key is None))
    while run.step is not None:
        step = run.step
        if isinstance(step, Run):
            context = Context(conn, step) if blocking else AsyncContext(conn, step)
            run.resume(*await outcome_async(handler, context))
        elif isinstance(step, Sleep):
            await anyio.sleep(step.seconds)
            run.resume(None, None)
        elif blocking:
            # The statements up to the next pause or the handler, in one worker thread:
            # a connection never waits for a thread in the middle of a statement's
            # transaction (a pooler's few server connections and the threads would wait
            # for each other), except while the handler runs in the claim's.
            await anyio.to_thread.run_sync(run_statements, conn, run)
        else:
            run.resume(*await outcome_async(run_async_step, conn, step))
    return cast(Response, run.answer)
