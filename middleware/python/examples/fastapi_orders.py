import psycopg
from fastapi import FastAPI, Request
from pg_idempotency.starlette import IdempotencyMiddleware

app = FastAPI()
app.add_middleware(IdempotencyMiddleware, connect=psycopg.connect)


@app.post("/orders", status_code=201)
def create_order(request: Request, order: dict):
    conn = request.state.idempotency.conn
    row = conn.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id",
                       (order["item"],)).fetchone()
    return {"order": row[0]}
