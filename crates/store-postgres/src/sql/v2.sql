-- qhost's store on PostgreSQL, schema version 2: a completion can write its outbox into pgmq
-- queues in its own transaction, where the queues live in the store's database. The outbox is
-- then never pending: there is nothing to send after the commit, and nothing to mark sent.

DROP FUNCTION qhost_schema.complete(
    text[], text[], bigint[], text[], text[], integer[], text[], text[], text[], bytea[],
    numeric[], bigint[]);

-- Whether pgmq queue `q` exists: the table `pgmq.send` would insert into.
CREATE FUNCTION qhost_schema.pgmq_queue_exists(q text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT to_regclass(format('pgmq.%I', lower('q_' || q))) IS NOT NULL
$$;

-- Marks leases completed, each with its outbox (NULL: none), digest and state writes, given
-- flat: write j belongs to completion `w_of[j]` (its place in `keys`) and is `w_op[j]` (set,
-- add or delete) of `w_key[j]` in `w_bucket[j]`, with `w_value`, `w_delta` and `w_ttl` (ms,
-- 0: until deleted). A completion may also carry its outbox as pgmq messages, flat the same
-- way: message j belongs to completion `o_of[j]` and goes to queue `o_queue[j]` with body
-- `o_msg[j]`, headers `o_headers[j]` and a delay of `o_delay[j]` seconds. When every queue it
-- names exists they are sent here and nothing is left pending (answer `sent`); otherwise the
-- outbox is kept pending like any other (answer `done`), for the host to send and mark sent.
-- The other answers: lost (the lease is not the caller's) or conflict (an add to a value that
-- is not a counter: nothing of it written).
CREATE FUNCTION qhost_schema.complete(
    keys text[], owners text[], windows bigint[], outboxes text[], digests text[],
    w_of integer[], w_bucket text[], w_key text[], w_op text[], w_value bytea[],
    w_delta numeric[], w_ttl bigint[],
    o_of integer[], o_queue text[], o_msg text[], o_headers text[], o_delay integer[])
RETURNS TABLE (i integer, answer text) LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := qhost_schema.clock_ms();
    n integer;
    held boolean;
    inline boolean;
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
        inline := EXISTS (SELECT 1 FROM unnest(o_of) AS o(x) WHERE o.x = n)
            AND NOT EXISTS (
                SELECT 1 FROM unnest(o_of, o_queue) AS o(x, q)
                WHERE o.x = n AND NOT qhost_schema.pgmq_queue_exists(o.q));
        IF inline THEN
            PERFORM pgmq.send(o.q, o.m::jsonb, o.h::jsonb, o.d)
            FROM unnest(o_of, o_queue, o_msg, o_headers, o_delay)
                WITH ORDINALITY AS o(x, q, m, h, d, j)
            WHERE o.x = n ORDER BY o.j;
        END IF;
        UPDATE qhost_schema.leases l
        SET state = 'completed', owner = NULL, expires_ms = now_ms + windows[n],
            forget_ms = greatest(l.forget_ms, now_ms + 2 * windows[n]), window_ms = windows[n],
            outbox = CASE WHEN inline THEN NULL ELSE outboxes[n] END,
            outbox_ms = CASE WHEN inline OR outboxes[n] IS NULL THEN NULL ELSE now_ms END,
            failures = 0, digest = digests[n]
        WHERE l.key = keys[n];
        answer := CASE WHEN inline THEN 'sent' ELSE 'done' END;
        RETURN NEXT;
    END LOOP;
END
$$;
