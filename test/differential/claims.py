#!/usr/bin/python3
"""Differential test of the claim protocol's fast paths (src/claims.hpp).

One generator of random operation sequences over a few keys and sessions --
idempotency_begin / _complete / _checkpoint / _release / _forget / _lookup /
_keys, the business write of a claimed request, BEGIN, COMMIT, ROLLBACK,
savepoints and their rollbacks, PREPARE TRANSACTION and COMMIT/ROLLBACK
PREPARED, cancelled waits and terminated sessions -- is run several times per
seed: with idempotency.defer_claims on and off, and (--also) on other
servers, such as one without the shared claims table
(idempotency.max_deferred_claims = 0: every claim takes the key lock and is
written at once) and one whose table is nearly always full (claims fall back
to the key lock).  Every answer and the final tables must be identical.  The driver runs one operation at a time; an operation
that waits for another session's transaction (which, idle, will not end) is
cancelled once the server shows it waiting, in both runs alike.

Beside the comparison, an oracle follows every session's transaction (its
savepoints, failures and prepared state) and what committed, and checks
each `claimed` answer as it comes: no other open or prepared transaction may
have claimed or written the key, and what committed for it must be nothing,
or a claim whose lease has ended -- never a live claim, never a completed
response.  So at no moment do two sessions hold `claimed` for one key, and a
completed key is never run again.

One operation is not run one at a time: a latest lookup held (by the test
pause idempotency.inject_fault = pause_in_read) right after it found a
committed version being changed, while the changing transaction or one of its
savepoints rolls back (claims.hpp, rule R).  Its answer depends on whether the
lookup got into that window, so it is left out of the comparison; the oracle
checks it instead: the record as the rollback left it, or the holder's claim
if the lookup answered before -- never a record without its attempt.

With --edition DSN, each seed also runs on a database with the SQL edition
(edition/, doc/sql-edition.md), and the answers are compared across the
editions.  Where doc/sql-edition.md's table says they differ -- a begin or a
newest-state lookup of a key that another open or prepared transaction holds,
which the edition answers from the committed row and the key's lock alone --
every run records only that the key was busy, after checking that the
answer is one the run's edition may give.

Usage: claims.py --dsn DSN [--also DSN ...] [--edition DSN] [--seconds N | --seeds N] [--first-seed N]
Prints one summary line; exits 1 on any difference or violation, with the
seed and the operation where it happened.
"""
import argparse
import random
import sys
import threading
import time

import psycopg

SCOPE = 'diff'
KEYS = ['k0', 'k1', 'k2']
SESSIONS = 3
OPERATIONS = 60
# An in-progress claim whose lease ends during a run would let a takeover in,
# which the oracle would have to time; a run is far shorter than a minute.
LEASE = '1 hour'


class Violation(Exception):
    pass


# ---------------------------------------------------------------------------
# The oracle: what each transaction did to each key, and what committed
# ---------------------------------------------------------------------------

# States of a key: 'absent'; 'held' (an unfinished claim, lease running);
# 'free' (an unfinished claim whose lease ended: released, or completed with
# a server error that is not stored); 'completed'.
class Oracle:
    def __init__(self):
        self.committed = {key: 'absent' for key in KEYS}
        self.prepared = {}  # gid -> {key: state}

    def others_hold(self, sessions, me, key):
        if any(key in changes for changes in self.prepared.values()):
            return True
        return any(s is not me and key in s.live_changes() for s in sessions)

    def check_claimed(self, sessions, me, key):
        if self.others_hold(sessions, me, key):
            raise Violation(f'{me.name} claimed {key} while another transaction holds it')
        own = me.live_changes().get(key)
        state = own if own is not None else self.committed[key]
        if state not in ('absent', 'free') and own != 'held':
            raise Violation(f'{me.name} claimed {key}, whose committed state is {state}')

    def commit(self, changes):
        self.committed.update(changes)


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------

class Session:
    def __init__(self, name, dsn, defer, monitor):
        self.name = name
        self.dsn = dsn
        self.defer = defer
        self.monitor = monitor
        self.connect()

    def connect(self):
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.conn.execute('SET idempotency.defer_claims = ' + ('on' if self.defer else 'off'))
        self.pid = self.conn.execute('SELECT pg_backend_pid()').fetchone()[0]
        self.reset_transaction()

    def reset_transaction(self):
        self.in_transaction = False
        self.failed = False    # the transaction (or its innermost savepoint) failed
        # Savepoint frames: (name, changes at the savepoint); the first holds
        # the changes of the transaction itself.
        self.frames = []
        self.changes = {}
        self.claimed = set()   # keys answered claimed in this transaction, for the work
        self.fresh = set()     # keys claimed afresh in this transaction (from absent)
        self.requests = {}     # key -> request used in this transaction

    def live_changes(self):
        """What this session's open transaction holds now."""
        if not self.in_transaction:
            return {}
        if self.failed:
            # A failure inside a savepoint aborted only that subtransaction;
            # outside any, the whole transaction, which then holds nothing.
            return dict(self.frames[-1][1]) if self.frames else {}
        return self.changes

    def run(self, sql, params=()):
        """Runs one statement; cancels it once the server shows it waiting.
        Returns ('ok', rows) or ('error', sqlstate)."""
        outcome = {}

        def work():
            try:
                cursor = self.conn.execute(sql, params)
                outcome['result'] = ('ok', cursor.fetchall() if cursor.description else None)
            except psycopg.Error as error:
                outcome['result'] = ('error', error.sqlstate)

        thread = threading.Thread(target=work)
        thread.start()
        while True:
            thread.join(0.002)
            if not thread.is_alive():
                return outcome['result']
            if self.monitor.waiting(self.pid):
                self.monitor.cancel(self.pid)
                thread.join()
                return outcome['result']


class Monitor:
    def __init__(self, dsn):
        self.conn = psycopg.connect(dsn, autocommit=True)

    def waiting(self, pid):
        # A lock wait; or the poll of a committed claim's lease, which the
        # extension makes in a latch wait and the SQL edition in pg_sleep.
        row = self.conn.execute(
            """SELECT cardinality(pg_blocking_pids(pid)) > 0 OR wait_event_type = 'Extension'
                      OR wait_event = 'PgSleep'
                 FROM pg_stat_activity WHERE pid = %s AND state = 'active'""", (pid,)).fetchone()
        return bool(row and row[0])

    def cancel(self, pid):
        self.conn.execute('SELECT pg_cancel_backend(%s)', (pid,))

    def terminate(self, pid):
        self.conn.execute('SELECT pg_terminate_backend(%s, 10000)', (pid,))


# ---------------------------------------------------------------------------
# One run of one seed
# ---------------------------------------------------------------------------

class Run:
    # Set when the runs of a seed include the SQL edition: answers that the
    # editions give differently for a key another transaction holds are
    # recorded as 'busy' (see the docstring).
    across_editions = False

    def __init__(self, dsn, seed, defer, edition=False):
        self.dsn = dsn
        self.edition = edition
        self.random = random.Random(seed)
        self.defer = defer
        self.monitor = Monitor(dsn)
        self.oracle = Oracle()
        self.trace = []
        self.savepoint_counter = 0
        self.gid_counter = 0
        self.sessions = [Session(f's{i}', dsn, defer, self.monitor) for i in range(SESSIONS)]
        self.windows_paused = 0  # lookups held in the window of a rollback (read_in_window)

    def record(self, session, what, result):
        self.trace.append(f'{session.name} {what} -> {result}')

    # The answer of a statement, as both runs must agree on it: the outcome
    # and attempt of a claim, the stored response of a replay, the state a
    # lookup sees, whether each timestamp is set.  (Their values differ
    # between runs.)
    def statement(self, session, what, sql, params=(), effect=None, busy=None):
        result = session.run(sql, params)
        if busy is not None and Run.across_editions and (result[0] == 'ok' or result[1] == '57014'):
            # Answered for a key another transaction holds: the extension
            # says in_progress or mismatch; the edition may also answer from
            # the committed row (a replay), or wait where the extension
            # answered mismatch (and the driver cancels the wait, 57014).
            allowed = busy[1] if self.edition else busy[0]
            answer = (result[1][0][0] if result[1] else 'nothing') if result[0] == 'ok' else result[1]
            if answer not in allowed:
                raise Violation(f'{session.name} {what}: {answer} for a key another transaction holds')
            self.record(session, what, 'busy')
            if result[0] == 'error' and session.in_transaction:
                session.failed = True
            return result
        self.record(session, what, result)
        if result[0] == 'error':
            if session.in_transaction:
                session.failed = True
            return result
        if effect is not None:
            effect(result[1])
        return result

    def change(self, session, key, state):
        if session.in_transaction:
            session.changes[key] = state
        else:
            self.oracle.commit({key: state})

    def claimed(self, session, key):
        self.oracle.check_claimed(self.sessions, session, key)
        if session.live_changes().get(key, self.oracle.committed[key]) == 'absent':
            session.fresh.add(key)
        self.change(session, key, 'held')
        session.claimed.add(key)

    # -- the API ----------------------------------------------------------------

    def begin(self, session, key):
        request = session.requests.get(key)
        if request is None:
            request = 'b' if self.random.random() < 0.1 else 'a'
            if session.in_transaction:
                session.requests[key] = request
        lease = self.random.choice([None, LEASE]) if session.in_transaction else LEASE

        def effect(rows):
            outcome, attempt, status, body, point = rows[0][:5]
            if outcome == 'claimed':
                self.claimed(session, key)

        self.statement(
            session, f'begin {key} {request} lease={lease}',
            """SELECT outcome::text, attempt,
                      CASE WHEN outcome = 'replay' THEN response_status END,
                      CASE WHEN outcome = 'replay' THEN response_body::text END,
                      CASE WHEN outcome = 'claimed' THEN recovery_point END,
                      status, lease_expires_at IS NULL, expires_at IS NULL
                 FROM idempotency_begin(%s, %s, request_hash(%s::text), lease => %s::interval)""",
            (SCOPE, key, request, lease), effect, busy=self.busy_answers(session, key))

    def busy_answers(self, session, key):
        """For a key another transaction holds, the answers the extension and
        the edition may give (None when nobody else holds it)."""
        if not self.oracle.others_hold(self.sessions, session, key):
            return None
        return ({'in_progress', 'mismatch', '57014'}, {'in_progress', 'mismatch', 'replay', '57014'})

    def wait_and_cancel(self, session, key):
        def effect(rows):
            if rows[0][0] == 'claimed':
                self.claimed(session, key)

        request = session.requests.get(key, 'a')
        if Run.across_editions and self.oracle.others_hold(self.sessions, session, key):
            # The extension answers another request's claim at once
            # (mismatch); the edition waits for it, and the cancelled wait
            # fails the transaction: the sequences would part.  (The
            # isolation specs test waiting on a held key in both editions.)
            self.record(session, f'waiting begin {key}', 'busy, not run')
            return
        self.statement(
            session, f'waiting begin {key}',
            """SELECT outcome::text, attempt FROM idempotency_begin(%s, %s, request_hash(%s::text),
                      lease => %s::interval, wait => '1 hour')""",
            (SCOPE, key, request, LEASE), effect, busy=self.busy_answers(session, key))

    def complete(self, session, key):
        status = self.random.choice([201, 201, 201, 503])
        self.statement(
            session, f'complete {key} {status}',
            'SELECT idempotency_complete(%s, %s, %s, jsonb_build_object(%s::text, %s::text))',
            (SCOPE, key, status, 'order', key),
            lambda rows: self.change(session, key, 'completed' if rows[0][0] else 'free'))

    def checkpoint(self, session, key):
        self.statement(
            session, f'checkpoint {key}',
            "SELECT idempotency_checkpoint(%s, %s, 'step') > now()", (SCOPE, key),
            lambda rows: self.change(session, key, 'held'))

    def release(self, session, key):
        self.statement(session, f'release {key}', 'SELECT idempotency_release(%s, %s)',
                       (SCOPE, key), lambda rows: self.change(session, key, 'free'))

    def forget(self, session, key):
        def effect(rows):
            if rows[0][0]:
                self.change(session, key, 'absent')

        self.statement(session, f'forget {key}', 'SELECT idempotency_forget(%s, %s)',
                       (SCOPE, key), effect)

    def lookup(self, session, key):
        # Half the time, a key a prepared transaction changed: what such a
        # transaction wrote is not committed, and reads as held.
        prepared = sorted({k for changes in self.oracle.prepared.values() for k in changes})
        if prepared and self.random.random() < 0.5:
            key = self.random.choice(prepared)
        latest = self.random.choice([False, True])
        busy = None
        if latest and self.oracle.others_hold(self.sessions, session, key):
            busy = ({'in_progress', 'nothing'}, {'in_progress', 'completed', 'nothing'})
        self.statement(
            session, f'lookup {key} latest={latest}',
            """SELECT status, attempt, committed, response_status, response_body::text,
                      recovery_point, claim_data::text, lease_expires_at IS NULL,
                      expires_at IS NULL, completed_at IS NULL
                 FROM idempotency_lookup(%s, %s, latest => %s)""", (SCOPE, key, latest), busy=busy)

    def read_in_window(self, holder):
        """A latest lookup by another session held (idempotency.inject_fault =
        pause_in_read, lock 18762) right after it found the committed version of
        a key that `holder`'s transaction is changing, while that transaction or
        one of its savepoints rolls back (claims.hpp, rule R).  The answer
        depends on whether the reader reached the window (a non-HOT update may
        put the new version first), so the trace says only that the lookup ran;
        the oracle checks it: the record as the rollback left it, never one
        without its attempt."""
        def changed():
            return sorted(key for key in holder.live_changes()
                          if self.oracle.committed[key] != 'absent' and key not in holder.fresh)

        readers = [s for s in self.sessions if s is not holder and not s.failed]
        if holder.failed or not readers:
            return self.lookup(holder, self.random.choice(KEYS))
        if not changed():
            # Change a committed record first, as a later request would.
            free = [key for key in KEYS if self.oracle.committed[key] != 'absent'
                    and key not in holder.fresh
                    and not self.oracle.others_hold(self.sessions, holder, key)]
            if not free:
                return self.lookup(holder, self.random.choice(KEYS))
            key = self.random.choice(free)
            changes = {'completed': [self.forget], 'free': [self.begin],
                       'held': [self.complete, self.checkpoint, self.release]}
            self.random.choice(changes[self.oracle.committed[key]])(holder, key)
        keys = changed()
        if holder.failed or not keys:
            return
        key = self.random.choice(keys)
        reader = self.random.choice(readers)
        savepoint = bool(holder.frames) and self.random.random() < 0.4
        self.monitor.conn.execute('SELECT pg_advisory_lock(18762)')
        reader.conn.execute("SET idempotency.inject_fault = 'pause_in_read'")
        outcome = {}

        # Not through reader.run, which would cancel the paused lookup.
        def work():
            try:
                outcome['result'] = ('ok', reader.conn.execute(
                    """SELECT status, attempt, committed
                         FROM idempotency_lookup(%s, %s, latest => true)""", (SCOPE, key)).fetchall())
            except psycopg.Error as error:
                outcome['result'] = ('error', error.sqlstate)

        thread = threading.Thread(target=work)
        thread.start()
        while thread.is_alive() and not self.monitor.waiting(reader.pid):
            thread.join(0.002)
        paused = thread.is_alive()
        before = holder.live_changes().get(key)
        if savepoint:
            self.rollback_to(holder)
        else:
            self.rollback(holder)
        after = holder.live_changes().get(key)
        self.monitor.conn.execute('SELECT pg_advisory_unlock(18762)')
        thread.join()
        reader.conn.execute('RESET idempotency.inject_fault')
        self.record(reader, f'lookup {key} latest=True in the window', '')
        self.windows_paused += paused
        result = outcome['result']
        held = before if not paused else after
        if result[0] == 'error':
            raise Violation(f'{reader.name} lookup of {key} in the window failed: {result[1]}')
        rows = result[1]
        if held is not None and self.edition:
            # The SQL edition has no pause: the lookup answered while the
            # holder still held the key's lock, which it shows as in_progress,
            # not committed, and nothing else (doc/sql-edition.md).
            good = rows == [('in_progress', None, False)]
        elif held is not None:
            # Still changed by the holder: its claim, uncommitted.
            good = len(rows) == 1 and rows[0][2] is False and (
                held == 'absent' or rows[0][1] is not None)
        else:
            # The committed record, as the rollback left it.
            state = self.oracle.committed[key]
            good = len(rows) == 1 and rows[0][1] is not None and rows[0][2] is True and (
                (rows[0][0] == 'completed') == (state == 'completed'))
        if not good:
            raise Violation(f'{reader.name} lookup of {key} in the window (paused: {paused}, '
                            f'{holder.name} holding {held}, committed {self.oracle.committed[key]}) '
                            f'answered {rows}')

    def listing(self, session):
        # Sorted by key: the listing's own order is its keys' digests', which
        # each database's secret fixes differently.
        self.statement(session, 'keys',
                       'SELECT key, status, attempt, committed FROM idempotency_keys(%s) ORDER BY key',
                       (SCOPE,))

    def work(self, session):
        key = self.random.choice(sorted(session.claimed))
        self.statement(session, f'work {key}', 'INSERT INTO orders (key, by) VALUES (%s, %s)',
                       (key, session.name))

    # -- transactions -------------------------------------------------------------

    def open(self, session):
        self.statement(session, 'BEGIN', 'BEGIN')
        session.in_transaction = True

    def commit(self, session):
        changes = session.live_changes()
        result = self.statement(session, 'COMMIT', 'COMMIT')
        if result[0] == 'ok' and not session.failed:
            self.oracle.commit(changes)
        session.reset_transaction()

    def rollback(self, session):
        self.statement(session, 'ROLLBACK', 'ROLLBACK')
        session.reset_transaction()

    def savepoint(self, session):
        self.savepoint_counter += 1
        name = f'sp{self.savepoint_counter}'
        if self.statement(session, f'SAVEPOINT {name}', f'SAVEPOINT {name}')[0] == 'ok':
            session.frames.append((name, dict(session.changes)))

    def rollback_to(self, session):
        index = self.random.randrange(len(session.frames))
        name, changes = session.frames[index]
        result = session.run(f'ROLLBACK TO SAVEPOINT {name}')
        self.record(session, f'ROLLBACK TO {name}', result)
        if result[0] == 'ok':
            del session.frames[index + 1:]
            session.changes = dict(changes)
            session.failed = False

    def release_savepoint(self, session):
        index = self.random.randrange(len(session.frames))
        name = session.frames[index][0]
        if self.statement(session, f'RELEASE {name}', f'RELEASE SAVEPOINT {name}')[0] == 'ok':
            del session.frames[index:]

    def prepare(self, session):
        self.gid_counter += 1
        gid = f'g{self.gid_counter}'
        changes = session.live_changes()
        result = self.statement(session, f'PREPARE {gid}', f"PREPARE TRANSACTION '{gid}'")
        if result[0] == 'ok' and not session.failed:
            self.oracle.prepared[gid] = dict(changes)
        session.reset_transaction()
        # What a prepared transaction holds is what readers most easily get
        # wrong (no session runs it): a session asks at once.
        if changes:
            reader = self.random.choice(self.sessions)
            key = self.random.choice(sorted(changes))
            self.random.choice([self.lookup, self.begin])(reader, key)

    def finish_prepared(self, session):
        gid = self.random.choice(sorted(self.oracle.prepared))
        commit = self.random.random() < 0.6
        verb = 'COMMIT' if commit else 'ROLLBACK'
        result = self.statement(session, f'{verb} PREPARED {gid}', f"{verb} PREPARED '{gid}'")
        if result[0] == 'ok':
            changes = self.oracle.prepared.pop(gid)
            if commit:
                self.oracle.commit(changes)

    def terminate(self, session):
        self.record(session, 'terminated', '')
        self.monitor.terminate(session.pid)
        session.conn.close()
        session.connect()

    # -- the generator ----------------------------------------------------------------

    def step(self):
        session = self.random.choice(self.sessions)
        key = self.random.choice(KEYS)
        roll = self.random.random()
        if not session.in_transaction:
            if roll < 0.55:
                self.open(session)
            elif roll < 0.65:
                self.begin(session, key)             # the two-phase pattern's claim
            elif roll < 0.72:
                self.random.choice([self.complete, self.checkpoint, self.release,
                                    self.forget, self.lookup])(session, key)
            elif roll < 0.80 and self.oracle.prepared:
                self.finish_prepared(session)
            elif roll < 0.86:
                self.wait_and_cancel(session, key)
            elif roll < 0.88:
                self.terminate(session)
            else:
                self.lookup(session, key)
            return
        if session.failed:
            if session.frames and roll < 0.5:
                self.rollback_to(session)
            elif roll < 0.8:
                self.rollback(session)
            else:
                self.begin(session, key)             # refused: the transaction failed
            return
        # A transaction that completed a key is prepared more often: its
        # completion is then written and held by a transaction no session
        # runs, which readers must answer as any other holder.
        if 'completed' in session.changes.values() and self.random.random() < 0.2:
            self.prepare(session)
            return
        choices = [
            (0.24, lambda: self.begin(session, key)),
            (0.10, lambda: self.complete(session, key)),
            (0.04, lambda: self.checkpoint(session, key)),
            (0.04, lambda: self.release(session, key)),
            (0.06, lambda: self.forget(session, key)),
            (0.06, lambda: self.lookup(session, key)),
            (0.03, lambda: self.listing(session)),
            (0.06, lambda: self.work(session) if session.claimed else self.lookup(session, key)),
            (0.07, lambda: self.savepoint(session)),
            (0.05, lambda: self.rollback_to(session) if session.frames else self.savepoint(session)),
            (0.03, lambda: self.release_savepoint(session) if session.frames else self.savepoint(session)),
            (0.03, lambda: self.wait_and_cancel(session, key)),
            (0.07, lambda: self.commit(session)),
            (0.02, lambda: self.rollback(session)),
            (0.05, lambda: self.read_in_window(session)),
            (0.04, lambda: self.prepare(session)),
            (0.01, lambda: self.terminate(session)),
        ]
        for weight, action in choices:
            if roll < weight:
                action()
                return
            roll -= weight
        self.commit(session)

    def finish(self):
        for session in self.sessions:
            if session.in_transaction:
                self.commit(session)
        for gid in sorted(self.oracle.prepared):
            self.trace.append(f'COMMIT PREPARED {gid} at the end')
            self.monitor.conn.execute(f"COMMIT PREPARED '{gid}'")
        self.oracle.prepared.clear()
        rows = self.monitor.conn.execute(
            """SELECT scope, key, status, attempt, encode(request::bytea, 'hex'), response_status, response_body::text,
                      recovery_point, lease_expires_at IS NULL
                 FROM idempotency.keys ORDER BY scope, key""").fetchall()
        self.trace.append(f'table: {rows}')
        orders = self.monitor.conn.execute('SELECT key, by FROM orders ORDER BY id').fetchall()
        self.trace.append(f'orders: {orders}')
        for session in self.sessions:
            session.conn.close()
        self.monitor.conn.close()

    def run(self):
        for _ in range(OPERATIONS):
            self.step()
        self.finish()
        return self.trace


def reset(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        for (gid,) in conn.execute('SELECT gid FROM pg_prepared_xacts WHERE database = current_database()').fetchall():
            conn.execute(f"ROLLBACK PREPARED '{gid}'")
        conn.execute('TRUNCATE idempotency.keys, orders')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--dsn', required=True)
    parser.add_argument('--also', action='append', default=[],
                        help='another server to run each seed on, with defer_claims on')
    parser.add_argument('--edition', default=None,
                        help='a database with the SQL edition, to run each seed on too')
    parser.add_argument('--seconds', type=float, default=None)
    parser.add_argument('--seeds', type=int, default=None)
    parser.add_argument('--first-seed', type=int, default=1)
    args = parser.parse_args()
    # Each run: a server, whether claims are deferred, and whether it is the
    # SQL edition.
    runs = [(args.dsn, True, False), (args.dsn, False, False)] + [(dsn, True, False) for dsn in args.also]
    if args.edition:
        runs.append((args.edition, True, True))
        Run.across_editions = True
    for dsn in [args.dsn] + args.also + ([args.edition] if args.edition else []):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute('CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, key text NOT NULL, by text NOT NULL)')
    started = time.monotonic()
    tally = {' complete ': 0, ' PREPARE ': 0, ' COMMIT PREPARED ': 0, ' ROLLBACK PREPARED ': 0,
             'latest=True': 0}
    seed = args.first_seed
    seeds = operations = windows = 0
    while True:
        if args.seeds is not None and seeds >= args.seeds:
            break
        # Past --seconds, it goes on (up to five times as long) until every
        # operation of the tally below has succeeded at least once.
        elapsed = time.monotonic() - started
        if args.seconds is not None and elapsed >= args.seconds and (
                all(tally.values()) or elapsed >= 5 * args.seconds):
            break
        traces = []
        for number, (dsn, defer, edition) in enumerate(runs):
            reset(dsn)
            run = Run(dsn, seed, defer, edition)
            try:
                traces.append(run.run())
                if number == 0:
                    first_run_windows = run.windows_paused
            except Violation as violation:
                print('\n'.join(run.trace))
                print(f'seed {seed}, run {describe(number, defer, edition)}: {violation}')
                return 1
        for number, trace in enumerate(traces[1:], start=1):
            if trace == traces[0]:
                continue
            print(f'seed {seed}: the answers of run {describe(number, runs[number][1], runs[number][2])} differ '
                  f'from those of run {describe(0, True)}')
            for first, other in zip(traces[0], trace):
                marker = '   ' if first == other else '!! '
                print(f'{marker}{first}')
                if first != other:
                    print(f'{marker}{other}')
                    break
            return 1
        for what in tally:
            tally[what] += sum(1 for line in traces[0] if what in line and "-> ('ok'" in line)
        windows += first_run_windows
        seeds += 1
        operations += OPERATIONS
        seed += 1
    print(f'{seeds} sequences of {OPERATIONS} operations ({operations} in all, each run '
          f'{len(runs)} times: defer_claims on and off, on {len(args.also)} other servers'
          f'{" and on the SQL edition" if args.edition else ""}) '
          f'over {SESSIONS} sessions and {len(KEYS)} keys: 0 differences, 0 violations')
    # What the sequences did, so that a test can tell that they reached the
    # states that matter: an operation that always failed would compare equal
    # in every run and prove nothing.
    print('succeeded: ' + ', '.join(f'{what.strip()} {count}' for what, count in tally.items()))
    print(f'lookups held in the window of a rollback (first runs): {windows}')
    return 0


def describe(number, defer, edition=False):
    """A run, as the summary and the reports name it."""
    if edition:
        return f'{number + 1} (the SQL edition)'
    if number < 2:
        return f'{number + 1} (defer_claims {"on" if defer else "off"})'
    return f'{number + 1} (--also #{number - 1})'


if __name__ == '__main__':
    sys.exit(main())
