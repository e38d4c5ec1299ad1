-- Mark a leased key completed, with its outbox, if ARGV[1] still owns it and it has not lapsed.
-- KEYS[1] the record. ARGV[2] dedup window ms; ARGV[3] outbox JSON ('' for none);
-- ARGV[4] the sha256 of the body that ran ('' if not known); ARGV[5..], on one server, the
-- run's state (kv.lua), checked and written here, KEYS[2..] its keys. Returns 1 when
-- completed, 0 when the lease was not the caller's, 2 when a key the run read has changed.
-- Without an outbox the record becomes the string 'c:TOKEN' (or 'c:TOKEN:DIGEST'): a string
-- costs Redis less than a hash (no hash object beside the key), and a completed record is most
-- of what a store holds.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  return 0 -- completed already
end
local f = redis.call('HMGET', KEYS[1], 's', 'o', 'u', 'f')
if f[1] ~= 'l' or f[2] ~= ARGV[1] or tonumber(f[3]) <= now then
  return 0
end
if ARGV[5] then
  if not kv_check(5) then
    return 2
  end
  kv_apply(5, now)
end
-- The fencing token stays: a key is remembered, tokens and all, for its window.
if ARGV[3] == '' then
  local done = 'c:' .. f[4]
  if ARGV[4] ~= '' then
    done = done .. ':' .. ARGV[4]
  end
  redis.call('SET', KEYS[1], done, 'PX', ARGV[2])
  return 1
end
redis.call('HDEL', KEYS[1], 'o', 'u', 'n')
redis.call('HSET', KEYS[1], 's', 'c')
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'd', ARGV[4])
end
redis.call('HSET', KEYS[1], 'b', ARGV[3], 't', now)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
