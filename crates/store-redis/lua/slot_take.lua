-- Take one of a flow key's slots (see idempotency::slots, whose `decide` is the same rule).
-- KEYS[1] the key's slots: a sorted set of holders scored by expiry in ms. ARGV[1] the
-- holder's token, ARGV[2] the limit, ARGV[3] the slot's time to live in ms.
-- Returns {1, 0} with the slot held, or {0, ms until the earliest holder lapses}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  local ttl = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  -- The set lives as long as its longest holder may.
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return {1, 0}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
