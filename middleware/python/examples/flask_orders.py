import psycopg
from flask import Flask, request
from pg_idempotency.flask import idempotent

app = Flask(__name__)


@app.post("/orders")
@idempotent(psycopg.connect)
def create_order(idem):
    row = idem.conn.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id",
                            (request.json["item"],)).fetchone()
    return {"order": row[0]}, 201
