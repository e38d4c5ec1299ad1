-- Extend a held flow slot. KEYS[1] the key's slots, ARGV[1] the holder's token, ARGV[2] the
-- new time to live in ms. Returns 1, or 0 when the slot lapsed (it no longer counts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if until_ms <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
