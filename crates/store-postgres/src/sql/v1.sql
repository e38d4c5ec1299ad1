-- qhost's store on PostgreSQL, schema version 1. `qhost_schema` stands for the schema the
-- configuration names (quoted); the migration replaces it before it runs the text.
--
-- Every time is the server's clock (`clock_ms()`), never a host's: hosts whose clocks disagree
-- agree on when a lease lapses. Every state change is one function call, so a step is one
-- round trip and one transaction. Rows that hold the same key are locked in key order, and the
-- advisory locks of state keys and flow slots are taken before any row lock and in hash order,
-- so two calls never wait on each other in a cycle.

CREATE FUNCTION qhost_schema.clock_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Leases and completed records, one row per key. A row is `live` while `expires_ms` has not
-- passed; after that it counts as absent, but stays until `forget_ms` (its expiry plus the
-- key's dedup window) so its fencing counter keeps growing for as long as anyone could hold
-- an older token. The sweeper deletes it after.
CREATE TABLE qhost_schema.leases (
    key text PRIMARY KEY,
    state text NOT NULL CHECK (state IN ('leased', 'completed', 'released')),
    owner text,
    fencing bigint NOT NULL,
    expires_ms bigint NOT NULL,
    forget_ms bigint NOT NULL,
    window_ms bigint NOT NULL,
    outbox text,
    outbox_ms bigint,
    failures integer NOT NULL DEFAULT 0,
    digest text
);
CREATE INDEX leases_forget ON qhost_schema.leases (forget_ms);

-- Handler state: one row per key of a stored bucket; `expires_ms` NULL lives until deleted.
-- Keys compare as bytes (collation "C"), so a bucket lists in the same order on every backend.
CREATE TABLE qhost_schema.kv (
    bucket text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    value bytea NOT NULL,
    expires_ms bigint,
    PRIMARY KEY (bucket, key)
);
CREATE INDEX kv_expires ON qhost_schema.kv (expires_ms) WHERE expires_ms IS NOT NULL;

-- Records a fleet shares (rollouts, schedules, the roster), replaced by compare-and-set.
CREATE TABLE qhost_schema.records (
    key text PRIMARY KEY,
    value text NOT NULL,
    expires_ms bigint NOT NULL
);
CREATE INDEX records_expires ON qhost_schema.records (expires_ms);

-- The fleet rate: each key's theoretical arrival time (GCRA). A TAT in the past counts for
-- nothing, so the row may go once it has passed.
CREATE TABLE qhost_schema.rate (
    key text PRIMARY KEY,
    tat_us bigint NOT NULL,
    forget_ms bigint NOT NULL
);
CREATE INDEX rate_forget ON qhost_schema.rate (forget_ms);

-- Flow slots: a row per holder, until it is given back or lapses.
CREATE TABLE qhost_schema.slots (
    key text NOT NULL,
    holder text NOT NULL,
    expires_ms bigint NOT NULL,
    PRIMARY KEY (key, holder)
);
CREATE INDEX slots_expires ON qhost_schema.slots (expires_ms);

-- What one lease request came to: `kind` is granted, completed or busy.
CREATE TYPE qhost_schema.acquired AS (
    i integer,
    kind text,
    owner text,
    fencing bigint,
    failures integer,
    outbox text,
    pending_ms bigint,
    digest text,
    retry_ms bigint
);

-- Takes a lease on each key (`ttls` and `windows` in ms, beside them): one answer per key,
-- `i` its place in the request. A key asked twice in one call is granted once: the second
-- finds the first's lease.
CREATE FUNCTION qhost_schema.acquire(keys text[], ttls bigint[], windows bigint[])
RETURNS SETOF qhost_schema.acquired LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := qhost_schema.clock_ms();
    n integer;
    r qhost_schema.leases;
    a qhost_schema.acquired;
BEGIN
    FOR n IN SELECT o FROM unnest(keys) WITH ORDINALITY AS u(k, o) ORDER BY k, o LOOP
        a := ROW(n, 'granted', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        SELECT * INTO r FROM qhost_schema.leases l WHERE l.key = keys[n] FOR UPDATE;
        IF NOT FOUND THEN
            -- A new key: the grant is the insert, unless another call inserted it first.
            a.owner := gen_random_uuid()::text;
            INSERT INTO qhost_schema.leases
                (key, state, owner, fencing, expires_ms, forget_ms, window_ms)
            VALUES (keys[n], 'leased', a.owner, 1, now_ms + ttls[n],
                    now_ms + ttls[n] + windows[n], windows[n])
            ON CONFLICT (key) DO NOTHING;
            IF FOUND THEN
                a.fencing := 1;
                a.failures := 0;
                RETURN NEXT a;
                CONTINUE;
            END IF;
            SELECT * INTO r FROM qhost_schema.leases l WHERE l.key = keys[n] FOR UPDATE;
        END IF;
        IF r.expires_ms > now_ms AND r.state = 'completed' THEN
            a.kind := 'completed';
            a.outbox := r.outbox;
            a.pending_ms := CASE WHEN r.outbox_ms IS NULL THEN 0
                                 ELSE greatest(now_ms - r.outbox_ms, 0) END;
            a.digest := r.digest;
        ELSIF r.expires_ms > now_ms AND r.state = 'leased' THEN
            a.kind := 'busy';
            a.retry_ms := r.expires_ms - now_ms;
        ELSE
            -- Absent in all but its fencing counter: lapsed, released or forgotten.
            a.owner := gen_random_uuid()::text;
            a.fencing := r.fencing + 1;
            a.failures := r.failures;
            UPDATE qhost_schema.leases l
            SET state = 'leased', owner = a.owner, fencing = a.fencing,
                expires_ms = now_ms + ttls[n],
                forget_ms = greatest(l.forget_ms, now_ms + ttls[n] + windows[n]),
                window_ms = windows[n], outbox = NULL, outbox_ms = NULL
            WHERE l.key = keys[n];
        END IF;
        RETURN NEXT a;
    END LOOP;
END
$$;

-- Whether `value` is a counter: decimal digits, at most 10^18 (commit::counter's rule).
CREATE FUNCTION qhost_schema.is_counter(value bytea) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NULL OR (encode(value, 'escape') ~ '^[0-9]{1,19}$'
                             AND encode(value, 'escape')::numeric <= 1000000000000000000)
$$;

-- The advisory lock of a state key, so a completion that checked what a key holds commits
-- before anyone writes it (absent keys have no row to lock).
CREATE FUNCTION qhost_schema.kv_lock_id(bucket text, key text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('qhost-kv' || chr(31) || bucket || chr(31) || key, 0)
$$;

-- The live value of a state key.
CREATE FUNCTION qhost_schema.kv_value(b text, k text, now_ms bigint) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT value FROM qhost_schema.kv
    WHERE bucket = b AND key = k AND (expires_ms IS NULL OR expires_ms > now_ms)
$$;

-- Marks leases completed, each with its outbox (NULL: none), digest and state writes, given
-- flat: write j belongs to completion `w_of[j]` (its place in `keys`) and is `w_op[j]` (set,
-- add or delete) of `w_key[j]` in `w_bucket[j]`, with `w_value`, `w_delta` and `w_ttl` (ms,
-- 0: until deleted). One answer per completion: done, lost (the lease is not the caller's)
-- or conflict (an add to a value that is not a counter: nothing of it written).
CREATE FUNCTION qhost_schema.complete(
    keys text[], owners text[], windows bigint[], outboxes text[], digests text[],
    w_of integer[], w_bucket text[], w_key text[], w_op text[], w_value bytea[],
    w_delta numeric[], w_ttl bigint[])
RETURNS TABLE (i integer, answer text) LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := qhost_schema.clock_ms();
    n integer;
    held boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(id) FROM (
        SELECT DISTINCT qhost_schema.kv_lock_id(b, k) AS id
        FROM unnest(w_bucket, w_key) AS w(b, k) ORDER BY 1) AS ids;
    FOR n IN SELECT o FROM unnest(keys) WITH ORDINALITY AS u(k, o) ORDER BY k, o LOOP
        i := n;
        SELECT true INTO held FROM qhost_schema.leases l
        WHERE l.key = keys[n] AND l.owner = owners[n] AND l.state = 'leased'
          AND l.expires_ms > now_ms
        FOR UPDATE;
        IF NOT FOUND THEN
            answer := 'lost';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF EXISTS (
            SELECT 1 FROM unnest(w_of, w_bucket, w_key, w_op) AS w(o, b, k, op)
            WHERE w.o = n AND w.op = 'add'
              AND NOT qhost_schema.is_counter(qhost_schema.kv_value(w.b, w.k, now_ms))) THEN
            answer := 'conflict';
            RETURN NEXT;
            CONTINUE;
        END IF;
        PERFORM qhost_schema.kv_apply(w.b, w.k, w.op, w.v, w.d, w.t, now_ms)
        FROM unnest(w_of, w_bucket, w_key, w_op, w_value, w_delta, w_ttl)
            WITH ORDINALITY AS w(o, b, k, op, v, d, t, j)
        WHERE w.o = n ORDER BY w.j;
        UPDATE qhost_schema.leases l
        SET state = 'completed', owner = NULL, expires_ms = now_ms + windows[n],
            forget_ms = greatest(l.forget_ms, now_ms + 2 * windows[n]), window_ms = windows[n],
            outbox = outboxes[n],
            outbox_ms = CASE WHEN outboxes[n] IS NULL THEN NULL ELSE now_ms END,
            failures = 0, digest = digests[n]
        WHERE l.key = keys[n];
        answer := 'done';
        RETURN NEXT;
    END LOOP;
END
$$;

-- One write of a completion's state.
CREATE FUNCTION qhost_schema.kv_apply(
    b text, k text, op text, v bytea, d numeric, ttl bigint, now_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    expires bigint := CASE WHEN ttl > 0 THEN now_ms + ttl END;
BEGIN
    IF op = 'delete' THEN
        DELETE FROM qhost_schema.kv WHERE bucket = b AND key = k;
        RETURN;
    END IF;
    IF op = 'add' THEN
        v := convert_to((coalesce(encode(qhost_schema.kv_value(b, k, now_ms), 'escape')::numeric, 0)
                         + d)::text, 'UTF8');
    END IF;
    INSERT INTO qhost_schema.kv (bucket, key, value, expires_ms) VALUES (b, k, v, expires)
    ON CONFLICT (bucket, key) DO UPDATE SET value = excluded.value,
                                            expires_ms = excluded.expires_ms;
END
$$;

-- Locks what a completion that read state decides on: its state keys (advisory locks, in
-- order) and its lease's row; answers whether the lease is the caller's, and the live values
-- of the keys read (`r_bucket`, `r_key`), in order. The caller compares them with what its run
-- saw and completes in the same transaction, or rolls back.
CREATE FUNCTION qhost_schema.lock_reads(
    k text, owner_token text, lock_bucket text[], lock_key text[], r_bucket text[], r_key text[])
RETURNS TABLE (held boolean, vals bytea[]) LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := qhost_schema.clock_ms();
BEGIN
    PERFORM pg_advisory_xact_lock(id) FROM (
        SELECT DISTINCT qhost_schema.kv_lock_id(b, x) AS id
        FROM unnest(lock_bucket, lock_key) AS w(b, x) ORDER BY 1) AS ids;
    held := EXISTS (
        SELECT 1 FROM qhost_schema.leases l
        WHERE l.key = k AND l.owner = owner_token AND l.state = 'leased'
          AND l.expires_ms > now_ms
        FOR UPDATE);
    SELECT array_agg(qhost_schema.kv_value(b, x, now_ms) ORDER BY o) INTO vals
    FROM unnest(r_bucket, r_key) WITH ORDINALITY AS r(b, x, o);
    RETURN NEXT;
END
$$;

-- Claims `k` as done with `outbox` pending (NULL: none) unless a live record (a run's lease or
-- a completion) holds it: whether it was won, and what holds it otherwise.
CREATE FUNCTION qhost_schema.claim(k text, new_outbox text, window_ms_ bigint)
RETURNS TABLE (won boolean, outbox text, pending_ms bigint) LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := qhost_schema.clock_ms();
    r qhost_schema.leases;
BEGIN
    INSERT INTO qhost_schema.leases AS l
        (key, state, owner, fencing, expires_ms, forget_ms, window_ms, outbox, outbox_ms)
    VALUES (k, 'completed', NULL, 1, now_ms + window_ms_, now_ms + 2 * window_ms_, window_ms_,
            new_outbox, CASE WHEN new_outbox IS NULL THEN NULL ELSE now_ms END)
    ON CONFLICT (key) DO NOTHING;
    IF FOUND THEN
        won := true;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT * INTO r FROM qhost_schema.leases l WHERE l.key = k FOR UPDATE;
    IF r.expires_ms > now_ms AND r.state <> 'released' THEN
        won := false;
        outbox := r.outbox;
        pending_ms := CASE WHEN r.outbox_ms IS NULL THEN 0 ELSE greatest(now_ms - r.outbox_ms, 0) END;
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE qhost_schema.leases l
    SET state = 'completed', owner = NULL, fencing = l.fencing + 1,
        expires_ms = now_ms + window_ms_,
        forget_ms = greatest(l.forget_ms, now_ms + 2 * window_ms_), window_ms = window_ms_,
        outbox = new_outbox, outbox_ms = CASE WHEN new_outbox IS NULL THEN NULL ELSE now_ms END,
        failures = 0, digest = NULL
    WHERE l.key = k;
    won := true;
    RETURN NEXT;
END
$$;

-- Takes over `k`'s outbox when it has been pending at least `after_ms`: its pending clock
-- restarts, and the outbox is the answer (none: not pending that long).
CREATE FUNCTION qhost_schema.take_over(k text, after_ms bigint) RETURNS text
LANGUAGE sql VOLATILE AS $$
    UPDATE qhost_schema.leases l SET outbox_ms = qhost_schema.clock_ms()
    WHERE l.key = k AND l.state = 'completed' AND l.expires_ms > qhost_schema.clock_ms()
      AND l.outbox IS NOT NULL AND l.outbox_ms <= qhost_schema.clock_ms() - after_ms
    RETURNING l.outbox
$$;

-- One GCRA step for `k` (see qhost_store::rate::decide, whose arithmetic this is): the wait in
-- µs, and whether the call was refused (`later`: nothing reserved).
CREATE FUNCTION qhost_schema.admit(k text, interval_us bigint, tolerance_us bigint,
                                   max_wait_us bigint)
RETURNS TABLE (later boolean, wait_us bigint) LANGUAGE plpgsql AS $$
DECLARE
    now_us bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    tat bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('qhost-rate' || chr(31) || k, 0));
    SELECT greatest(r.tat_us, now_us) INTO tat FROM qhost_schema.rate r WHERE r.key = k;
    tat := coalesce(tat, now_us);
    wait_us := greatest(tat - tolerance_us - now_us, 0);
    later := wait_us > max_wait_us;
    IF NOT later THEN
        INSERT INTO qhost_schema.rate (key, tat_us, forget_ms)
        VALUES (k, tat + interval_us, (tat + interval_us) / 1000 + 1)
        ON CONFLICT (key) DO UPDATE SET tat_us = excluded.tat_us,
                                        forget_ms = excluded.forget_ms;
    END IF;
    RETURN NEXT;
END
$$;

-- Takes one of `limits[j]` slots of each `keys[j]` for `ttls[j]` ms: the holder, or (NULL
-- holder) how long until the earliest live one lapses. One answer per request, `i` its place.
CREATE FUNCTION qhost_schema.take_slots(keys text[], limits integer[], ttls bigint[])
RETURNS TABLE (i integer, holder text, retry_ms bigint) LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := qhost_schema.clock_ms();
    n integer;
    live integer;
BEGIN
    PERFORM pg_advisory_xact_lock(id) FROM (
        SELECT DISTINCT hashtextextended('qhost-slots' || chr(31) || k, 0) AS id
        FROM unnest(keys) AS u(k) ORDER BY 1) AS ids;
    FOR n IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
        i := n;
        DELETE FROM qhost_schema.slots s WHERE s.key = keys[n] AND s.expires_ms <= now_ms;
        SELECT count(*), min(s.expires_ms) - now_ms INTO live, retry_ms
        FROM qhost_schema.slots s WHERE s.key = keys[n];
        IF live < limits[n] THEN
            holder := gen_random_uuid()::text;
            retry_ms := NULL;
            INSERT INTO qhost_schema.slots (key, holder, expires_ms)
            VALUES (keys[n], holder, now_ms + ttls[n]);
        ELSE
            holder := NULL;
            retry_ms := coalesce(retry_ms, 0);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
