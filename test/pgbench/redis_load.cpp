// redis_load: the Redis side of make bench (test/pgbench/run).  It does what
// the usual Redis idempotency middleware does, from several clients at once,
// and reports like pgbench so that the runner parses both the same way.
//
//   new     a new request: SET <key> <claim> NX EX <ttl> (the claim), then,
//           once its answer is back, SET <key> <response> EX <ttl> (the
//           response, stored after the work).  Two round trips, no
//           pipelining: the middleware cannot store before it has claimed.
//           A fresh random UUID-shaped key per request.  With --pg, the work
//           between the two SETs is the request's business INSERT in
//           PostgreSQL (the orders table of schema.sql, a prepared statement
//           in autocommit), as the usual middleware in front of a PostgreSQL
//           application does it: the whole request that the extension's
//           does in one transaction.
//   replay  a retry of a completed request: GET <key> of a prepopulated key.
//   populate  stores --keys completed keys (known key i holds response i),
//           then reads a sample back; run once, before the others.
//
// One "transaction" is one new request (both SETs) or one replay (one GET),
// as one pgbench transaction is one request on the extension's side.  Every
// answer is checked: the claim of a fresh key must be OK, the store OK, a
// replay must return key i's stored response byte for byte.  A wrong answer
// stops the run with "benchmark check failed" and exit status 2, as the
// pgbench scripts' checks do.  --broken makes the checks fail on purpose
// (new: the same key every time, so the second claim is refused; replay: a
// key that was never stored), which proves that they bite.
//
// --jobs threads share the clients, each thread polling its own, as pgbench
// -j does.  Each thread logs every transaction (or a --sampling-rate share of
// them) to <log-prefix>.<pid>.<thread> in pgbench's --log format, whose third
// field (latency in microseconds) the runner reads.
//
// Build: g++ -std=c++17 -O2 -I$(pg_config --includedir) redis_load.cpp -lhiredis -lpq -pthread

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include <poll.h>
#include <sys/time.h>
#include <unistd.h>
#include <getopt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace
{

using Clock = std::chrono::steady_clock;

// SHA-256 of bench_request() in schema.sql, the request every workload sends:
// the fingerprint a middleware stores with the key to tell a retry from a
// reuse of the key for another request.
constexpr const char *request_digest =
    "be8dc1ccba3eeaf5293ce5b32672546f3dc6d88d2bb50c7780f3e86ba800c385";

enum class Mode
{
    populate,
    new_request,
    replay
};

struct Options
{
    std::string socket;
    Mode mode = Mode::new_request;
    int clients = 8;
    int jobs = 2;
    double seconds = 10;
    long transactions = 0; // per client; 0: run for --seconds
    long keys = 100000;
    long ttl = 86400;
    std::string log_prefix;
    double sampling_rate = 1;
    bool broken = false;
    std::string pg; // new: the business INSERT in this PostgreSQL between the SETs
};

// ---------------------------------------------------------------- keys and values

uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
    x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
    return x ^ (x >> 31);
}

// The key as a middleware would name it: a prefix for the service, then the
// client's Idempotency-Key, here UUID-shaped like the extension's keys.
std::string uuid_key(uint64_t hi, uint64_t lo)
{
    char text[64];
    std::snprintf(text, sizeof text,
                  "idem:bench:%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
                  hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48, lo & 0xffffffffffff);
    return text;
}

// Known key i, one of the prepopulated ones; spread like random UUIDs.
std::string known_key(long i)
{
    return uuid_key(splitmix64(static_cast<uint64_t>(i)),
                    splitmix64(static_cast<uint64_t>(i) ^ 0x5bd1e9955bd1e995));
}

// What the claim stores: the request's fingerprint and that it is running.
std::string claim_value()
{
    return std::string(R"({"status":"in_progress","request":")") + request_digest + R"("})";
}

// What the completion stores, as the extension stores it: the fingerprint,
// the status code and the body.
std::string response_value(const std::string &body)
{
    return std::string(R"({"status":"completed","request":")") + request_digest +
           R"(","response_status":201,"response_body":)" + body + "}";
}

std::string known_response(long i)
{
    return response_value(R"({"order":)" + std::to_string(i) + "}");
}

// ---------------------------------------------------------------- connections

struct ContextFree
{
    void operator()(redisContext *c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextFree>;

struct ReplyFree
{
    void operator()(redisReply *r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

struct PgFree
{
    void operator()(PGconn *c) const { PQfinish(c); }
};
using Pg = std::unique_ptr<PGconn, PgFree>;

// The business INSERT of a new request, as schema.sql's orders table takes it.
constexpr const char *business_insert =
    "INSERT INTO orders (idem_key, item, qty) VALUES ($1, 'book', 1)";

Pg connect_pg(const std::string &conninfo)
{
    Pg c(PQconnectdb(conninfo.c_str()));
    if (!c || PQstatus(c.get()) != CONNECTION_OK)
        throw std::runtime_error("cannot connect to PostgreSQL: " +
                                 std::string(c ? PQerrorMessage(c.get()) : "out of memory"));
    PGresult *r = PQprepare(c.get(), "business_insert", business_insert, 1, nullptr);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok)
        throw std::runtime_error("cannot prepare the business INSERT: " +
                                 std::string(PQerrorMessage(c.get())));
    if (PQsetnonblocking(c.get(), 1) != 0)
        throw std::runtime_error("cannot make the PostgreSQL connection non-blocking");
    return c;
}

Context connect(const std::string &socket)
{
    Context c(redisConnectUnix(socket.c_str()));
    if (!c)
        throw std::runtime_error("cannot allocate a Redis connection");
    if (c->err)
        throw std::runtime_error("cannot connect to Redis at " + socket + ": " + c->errstr);
    return c;
}

// Writes one command completely.  The socket is blocking and a command is
// small, so this returns once the command is sent; only answers are polled.
void send_command(redisContext *c, const std::vector<std::string> &args)
{
    std::vector<const char *> argv;
    std::vector<size_t> argvlen;
    for (const auto &a : args)
    {
        argv.push_back(a.data());
        argvlen.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(args.size()), argv.data(), argvlen.data()) !=
        REDIS_OK)
        throw std::runtime_error(std::string("cannot send a command to Redis: ") + c->errstr);
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            throw std::runtime_error(std::string("cannot send a command to Redis: ") + c->errstr);
}

// A blocking round trip, for populating and checking outside the measured runs.
Reply command(redisContext *c, const std::vector<std::string> &args)
{
    send_command(c, args);
    void *r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK || r == nullptr)
        throw std::runtime_error(std::string("no answer from Redis: ") + c->errstr);
    return Reply(static_cast<redisReply *>(r));
}

bool is_ok(const redisReply *r)
{
    return r->type == REDIS_REPLY_STATUS && std::strcmp(r->str, "OK") == 0;
}

std::string describe(const redisReply *r)
{
    switch (r->type)
    {
        case REDIS_REPLY_NIL:
            return "nil";
        case REDIS_REPLY_STATUS:
            return std::string("status ") + r->str;
        case REDIS_REPLY_ERROR:
            return std::string("Redis error ") + r->str;
        case REDIS_REPLY_STRING:
            return "a string of " + std::to_string(r->len) + " bytes";
        case REDIS_REPLY_INTEGER:
            return "integer " + std::to_string(r->integer);
        default:
            return "a reply of type " + std::to_string(r->type);
    }
}

// ---------------------------------------------------------------- the check failure

// The first failed check, reported once; every thread stops at the next answer.
std::atomic<bool> check_failed{false};
std::mutex report_mutex;

void fail_check(const std::string &what)
{
    std::lock_guard<std::mutex> lock(report_mutex);
    if (!check_failed.exchange(true))
        std::fprintf(stderr, "redis_load: benchmark check failed: %s\n", what.c_str());
}

// ---------------------------------------------------------------- one client

// Where a new request stands.
enum class Step
{
    claim,    // awaits the answer of SET NX
    business, // awaits PostgreSQL's answer to the business INSERT (--pg)
    store     // awaits the answer of the SET that stores the response
};

struct Client
{
    Context ctx;
    Pg pg; // with --pg
    int id = 0;
    std::mt19937_64 rng;
    std::string key;
    std::string expected; // replay: the response key i must return
    Step step = Step::claim;
    long completed = 0;
    bool active = true;
    Clock::time_point started;
};

struct Run
{
    Options options;
    std::string claim = claim_value();
    std::string created = response_value(R"({"order":"created"})");
    std::string ttl;
    Clock::time_point start;
    Clock::time_point deadline;
};

// Starts the client's next transaction, or retires the client when the run is over.
void start_transaction(const Run &run, Client &c, Clock::time_point now)
{
    const Options &o = run.options;
    if (check_failed || (o.transactions > 0 ? c.completed >= o.transactions : now >= run.deadline))
    {
        c.active = false;
        return;
    }
    c.started = now;
    c.step = Step::claim;
    if (o.mode == Mode::new_request)
    {
        // --broken: one key for the whole run, so the second claim must be refused.
        c.key = o.broken ? "idem:bench:broken" : uuid_key(c.rng(), c.rng());
        send_command(c.ctx.get(), {"SET", c.key, run.claim, "NX", "EX", run.ttl});
    }
    else
    {
        // --broken: a key past the prepopulated ones, never stored.
        long i = o.broken ? o.keys + 1 : std::uniform_int_distribution<long>(1, o.keys)(c.rng);
        c.key = known_key(i);
        c.expected = known_response(i);
        send_command(c.ctx.get(), {"GET", c.key});
    }
}

// The middleware stores the response once the work is done.
void store_response(const Run &run, Client &c)
{
    c.step = Step::store;
    send_command(c.ctx.get(), {"SET", c.key, run.created, "EX", run.ttl});
}

// Checks one answer; returns true when it ended the transaction.
bool handle_reply(const Run &run, Client &c, const redisReply *r)
{
    if (run.options.mode == Mode::replay)
    {
        if (r->type != REDIS_REPLY_STRING)
            fail_check("replay of stored key " + c.key + " got " + describe(r));
        else if (std::string(r->str, r->len) != c.expected)
            fail_check("replay of stored key " + c.key + " got another response");
        return true;
    }
    if (c.step == Step::claim)
    {
        if (!is_ok(r))
        {
            fail_check("the claim (SET NX) of fresh key " + c.key + " got " + describe(r) +
                       (r->type == REDIS_REPLY_NIL ? " (the key existed)" : ""));
            return true;
        }
        if (c.pg)
        {
            // The work: the request's business INSERT.
            c.step = Step::business;
            const char *values[] = {c.key.c_str()};
            if (PQsendQueryPrepared(c.pg.get(), "business_insert", 1, values, nullptr, nullptr,
                                    0) != 1)
                throw std::runtime_error(std::string("cannot send the business INSERT: ") +
                                         PQerrorMessage(c.pg.get()));
            while (PQflush(c.pg.get()) == 1)
                ;
            return false;
        }
        store_response(run, c);
        return false;
    }
    if (!is_ok(r))
        fail_check("storing the response of key " + c.key + " got " + describe(r));
    return true;
}

// After the business INSERT's answer: the result of each statement, then the
// end of the query.  False while it is still coming.
bool business_done(Client &c)
{
    if (PQconsumeInput(c.pg.get()) != 1)
        throw std::runtime_error(std::string("connection to PostgreSQL lost: ") +
                                 PQerrorMessage(c.pg.get()));
    while (!PQisBusy(c.pg.get()))
    {
        PGresult *r = PQgetResult(c.pg.get());
        if (r == nullptr)
            return true;
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            fail_check("the business INSERT of key " + c.key + " failed: " +
                       PQresultErrorMessage(r));
        PQclear(r);
    }
    return false;
}

// ---------------------------------------------------------------- one thread

struct Thread
{
    std::vector<Client *> clients;
    std::FILE *log = nullptr;
    std::mt19937_64 sampler;
    long transactions = 0;
    double latency_sum_us = 0;
    Clock::time_point last_end;
    std::string error;
};

void log_transaction(const Run &run, Thread &t, const Client &c, long latency_us)
{
    if (t.log == nullptr ||
        (run.options.sampling_rate < 1 &&
         std::uniform_real_distribution<double>(0, 1)(t.sampler) >= run.options.sampling_rate))
        return;
    timeval tv;
    gettimeofday(&tv, nullptr);
    std::fprintf(t.log, "%d %ld %ld 0 %ld %ld\n", c.id, c.completed, latency_us,
                 static_cast<long>(tv.tv_sec), static_cast<long>(tv.tv_usec));
}

// Counts a finished transaction and starts the client's next one.
void finish_transaction(const Run &run, Thread &t, Client &c)
{
    auto now = Clock::now();
    if (!check_failed)
    {
        long latency_us = static_cast<long>(
            std::chrono::duration_cast<std::chrono::microseconds>(now - c.started).count());
        c.completed++;
        t.transactions++;
        t.latency_sum_us += latency_us;
        t.last_end = now;
        log_transaction(run, t, c, latency_us);
    }
    start_transaction(run, c, now);
}

// Reads what arrived for one client and handles each complete answer.
void receive(const Run &run, Thread &t, Client &c)
{
    if (redisBufferRead(c.ctx.get()) != REDIS_OK)
        throw std::runtime_error(std::string("connection to Redis lost: ") + c.ctx->errstr);
    for (;;)
    {
        void *raw = nullptr;
        if (redisGetReplyFromReader(c.ctx.get(), &raw) != REDIS_OK)
            throw std::runtime_error(std::string("bad answer from Redis: ") + c.ctx->errstr);
        if (raw == nullptr)
            return;
        Reply r(static_cast<redisReply *>(raw));
        if (handle_reply(run, c, r.get()))
            finish_transaction(run, t, c);
    }
}

// PostgreSQL answered a client's business INSERT, or part of it.
void receive_pg(const Run &run, Client &c)
{
    if (business_done(c))
        store_response(run, c);
}

void drive(const Run &run, Thread &t)
{
    for (Client *c : t.clients)
        start_transaction(run, *c, Clock::now());
    std::vector<pollfd> fds;
    std::vector<Client *> polled;
    for (;;)
    {
        fds.clear();
        polled.clear();
        // Each client waits on one server at a time: PostgreSQL during the
        // business INSERT, Redis otherwise.
        for (Client *c : t.clients)
            if (c->active)
            {
                int fd = c->step == Step::business ? PQsocket(c->pg.get()) : c->ctx->fd;
                fds.push_back({fd, POLLIN, 0});
                polled.push_back(c);
            }
        if (fds.empty())
            return;
        int ready = poll(fds.data(), fds.size(), 1000);
        if (ready < 0)
            throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
        for (size_t i = 0; i < fds.size(); i++)
            if (fds[i].revents != 0)
            {
                if (polled[i]->step == Step::business)
                    receive_pg(run, *polled[i]);
                else
                    receive(run, t, *polled[i]);
            }
    }
}

void drive_thread(const Run &run, Thread &t)
{
    try
    {
        drive(run, t);
    }
    catch (const std::exception &e)
    {
        t.error = e.what();
        // The other threads stop too: a run with a dead connection means nothing.
        check_failed = true;
    }
}

std::FILE *open_log(const Options &o, int thread)
{
    if (o.log_prefix.empty())
        return nullptr;
    std::string path = o.log_prefix + "." + std::to_string(getpid()) + "." + std::to_string(thread);
    std::FILE *f = std::fopen(path.c_str(), "w");
    if (f == nullptr)
        throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    return f;
}

// ---------------------------------------------------------------- the modes

const char *mode_description(const Options &o)
{
    if (o.mode == Mode::replay)
        return "replay: GET key of a stored key (1 round trip)";
    return o.pg.empty()
               ? "new request: SET key claim NX EX ttl; SET key response EX ttl (2 round trips)"
               : "new request: SET key claim NX EX ttl; INSERT the order in PostgreSQL; SET key "
                 "response EX ttl (3 round trips)";
}

int measure(const Options &o)
{
    Run run;
    run.options = o;
    run.ttl = std::to_string(o.ttl);

    std::random_device seed;
    std::vector<Client> clients(o.clients);
    for (int i = 0; i < o.clients; i++)
    {
        clients[i].ctx = connect(o.socket);
        if (!o.pg.empty() && o.mode == Mode::new_request)
            clients[i].pg = connect_pg(o.pg);
        clients[i].id = i;
        clients[i].rng.seed((static_cast<uint64_t>(seed()) << 32) ^ seed() ^ i);
    }
    std::vector<Thread> threads(std::min(o.jobs, o.clients));
    for (size_t j = 0; j < threads.size(); j++)
    {
        threads[j].log = open_log(o, static_cast<int>(j));
        threads[j].sampler.seed(seed());
    }
    for (int i = 0; i < o.clients; i++)
        threads[i % threads.size()].clients.push_back(&clients[i]);

    // As pgbench's "without initial connection time": the clock starts once
    // every client is connected.
    run.start = Clock::now();
    run.deadline = run.start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o.seconds));
    std::vector<std::thread> running;
    for (auto &t : threads)
        running.emplace_back(drive_thread, std::cref(run), std::ref(t));
    for (auto &r : running)
        r.join();

    long transactions = 0;
    double latency_sum_us = 0;
    Clock::time_point end = run.start;
    bool broken_connection = false;
    for (auto &t : threads)
    {
        transactions += t.transactions;
        latency_sum_us += t.latency_sum_us;
        end = std::max(end, t.last_end);
        if (t.log != nullptr && std::fclose(t.log) != 0)
            throw std::runtime_error("cannot write the transaction log");
        if (!t.error.empty())
        {
            std::fprintf(stderr, "redis_load: error: %s\n", t.error.c_str());
            broken_connection = true;
        }
    }
    double elapsed = std::chrono::duration<double>(end - run.start).count();
    long failed = check_failed && !broken_connection ? 1 : 0;

    std::printf("transaction type: %s\n", mode_description(o));
    std::printf("number of clients: %d\n", o.clients);
    std::printf("number of threads: %zu\n", threads.size());
    if (o.transactions > 0)
        std::printf("number of transactions per client: %ld\n", o.transactions);
    else
        std::printf("duration: %g s\n", o.seconds);
    std::printf("number of transactions actually processed: %ld\n", transactions);
    std::printf("number of failed transactions: %ld (%.3f%%)\n", failed,
                100.0 * failed / std::max(1L, transactions + failed));
    if (transactions > 0)
        std::printf("latency average = %.3f ms\n", latency_sum_us / transactions / 1000);
    if (transactions > 0 && elapsed > 0)
        std::printf("tps = %f (without initial connection time)\n", transactions / elapsed);
    return check_failed ? 2 : 0;
}

// Stores known keys 1..keys with their responses (pipelined: this is set-up,
// not a measured run), then checks that exactly they are there and that a
// sample reads back as written.
int populate(const Options &o)
{
    constexpr long batch = 1000;
    Context c = connect(o.socket);
    std::string ttl = std::to_string(o.ttl);
    auto started = Clock::now();
    for (long first = 1; first <= o.keys; first += batch)
    {
        long last = std::min(o.keys, first + batch - 1);
        for (long i = first; i <= last; i++)
        {
            std::string key = known_key(i), value = known_response(i);
            const char *argv[] = {"SET", key.c_str(), value.c_str(), "EX", ttl.c_str()};
            size_t argvlen[] = {3, key.size(), value.size(), 2, ttl.size()};
            if (redisAppendCommandArgv(c.get(), 5, argv, argvlen) != REDIS_OK)
                throw std::runtime_error(std::string("cannot send to Redis: ") + c->errstr);
        }
        for (long i = first; i <= last; i++)
        {
            void *raw = nullptr;
            if (redisGetReply(c.get(), &raw) != REDIS_OK || raw == nullptr)
                throw std::runtime_error(std::string("no answer from Redis: ") + c->errstr);
            Reply r(static_cast<redisReply *>(raw));
            if (!is_ok(r.get()))
            {
                fail_check("storing known key " + std::to_string(i) + " got " + describe(r.get()));
                return 2;
            }
        }
    }
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();

    Reply size = command(c.get(), {"DBSIZE"});
    if (size->type != REDIS_REPLY_INTEGER || size->integer != o.keys)
    {
        fail_check("after populating " + std::to_string(o.keys) + " keys DBSIZE is " +
                   describe(size.get()));
        return 2;
    }
    std::vector<long> sample = {1, o.keys};
    std::mt19937_64 rng(std::random_device{}());
    for (int n = 0; n < 1000; n++)
        sample.push_back(std::uniform_int_distribution<long>(1, o.keys)(rng));
    for (long i : sample)
    {
        Reply r = command(c.get(), {"GET", known_key(i)});
        if (r->type != REDIS_REPLY_STRING || std::string(r->str, r->len) != known_response(i))
        {
            fail_check("known key " + std::to_string(i) + " reads back as " + describe(r.get()));
            return 2;
        }
    }
    std::printf("stored %ld keys in %.1f s; %zu read back as written\n", o.keys, seconds,
                sample.size());
    return 0;
}

// ---------------------------------------------------------------- arguments

[[noreturn]] void usage(const char *why)
{
    std::fprintf(stderr,
                 "redis_load: %s\n"
                 "usage: redis_load --socket PATH --mode populate|new|replay [--clients N]\n"
                 "       [--jobs N] [--seconds S | --transactions N] [--keys N] [--ttl S]\n"
                 "       [--log-prefix P] [--sampling-rate R] [--broken] [--pg CONNINFO]\n",
                 why);
    std::exit(1);
}

long positive(const char *name, const char *text)
{
    char *end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v <= 0)
        usage((std::string(name) + " must be a positive integer").c_str());
    return v;
}

Options parse(int argc, char **argv)
{
    static const option longs[] = {{"socket", required_argument, nullptr, 's'},
                                   {"mode", required_argument, nullptr, 'm'},
                                   {"clients", required_argument, nullptr, 'c'},
                                   {"jobs", required_argument, nullptr, 'j'},
                                   {"seconds", required_argument, nullptr, 'T'},
                                   {"transactions", required_argument, nullptr, 't'},
                                   {"keys", required_argument, nullptr, 'k'},
                                   {"ttl", required_argument, nullptr, 'x'},
                                   {"log-prefix", required_argument, nullptr, 'l'},
                                   {"sampling-rate", required_argument, nullptr, 'r'},
                                   {"broken", no_argument, nullptr, 'b'},
                                   {"pg", required_argument, nullptr, 'p'},
                                   {nullptr, 0, nullptr, 0}};
    Options o;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longs, nullptr)) != -1)
    {
        switch (opt)
        {
            case 's':
                o.socket = optarg;
                break;
            case 'm':
                if (std::strcmp(optarg, "populate") == 0)
                    o.mode = Mode::populate;
                else if (std::strcmp(optarg, "new") == 0)
                    o.mode = Mode::new_request;
                else if (std::strcmp(optarg, "replay") == 0)
                    o.mode = Mode::replay;
                else
                    usage("--mode is populate, new or replay");
                break;
            case 'c':
                o.clients = static_cast<int>(positive("--clients", optarg));
                break;
            case 'j':
                o.jobs = static_cast<int>(positive("--jobs", optarg));
                break;
            case 'T':
                o.seconds = static_cast<double>(positive("--seconds", optarg));
                break;
            case 't':
                o.transactions = positive("--transactions", optarg);
                break;
            case 'k':
                o.keys = positive("--keys", optarg);
                break;
            case 'x':
                o.ttl = positive("--ttl", optarg);
                break;
            case 'l':
                o.log_prefix = optarg;
                break;
            case 'r':
                o.sampling_rate = std::atof(optarg);
                if (!(o.sampling_rate > 0 && o.sampling_rate <= 1))
                    usage("--sampling-rate must be in (0, 1]");
                break;
            case 'b':
                o.broken = true;
                break;
            case 'p':
                o.pg = optarg;
                break;
            default:
                usage("unknown option");
        }
    }
    if (optind != argc)
        usage("unexpected argument");
    if (o.socket.empty())
        usage("--socket is required");
    return o;
}

} // namespace

int main(int argc, char **argv)
{
    Options o = parse(argc, argv);
    try
    {
        return o.mode == Mode::populate ? populate(o) : measure(o);
    }
    catch (const std::exception &e)
    {
        std::fprintf(stderr, "redis_load: error: %s\n", e.what());
        return 1;
    }
}
