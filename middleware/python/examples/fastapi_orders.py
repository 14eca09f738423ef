import psycopg
from fastapi import FastAPI, Request
from pg_idempotency.starlette import IdempotencyMiddleware

app = FastAPI()
app.add_middleware(IdempotencyMiddleware, connect=psycopg.AsyncConnection.connect)


@app.post("/orders", status_code=201)
async def create_order(request: Request, order: dict):
    conn = request.state.idempotency.conn
    cur = await conn.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id",
                             (order["item"],))
    return {"order": (await cur.fetchone())[0]}
