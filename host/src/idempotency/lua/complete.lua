-- Mark a leased key completed, with its outbox, if ARGV[1] still owns it and it has not lapsed.
-- KEYS[1] the record. ARGV[2] dedup window ms; ARGV[3] outbox JSON ('' for none);
-- ARGV[4] the sha256 of the body that ran ('' if not known).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', KEYS[1], 's', 'o', 'u')
if f[1] ~= 'l' or f[2] ~= ARGV[1] or tonumber(f[3]) <= now then
  return 0
end
-- The fencing token stays: a key is remembered, tokens and all, for its window.
redis.call('HDEL', KEYS[1], 'o', 'u', 'n')
redis.call('HSET', KEYS[1], 's', 'c')
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'd', ARGV[4])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'b', ARGV[3], 't', now)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
