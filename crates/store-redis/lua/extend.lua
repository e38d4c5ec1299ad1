-- Extend a lease, if ARGV[1] still owns it and it has not lapsed. KEYS[1] the record.
-- ARGV[2] lease ms; ARGV[3] the record's lifetime ms (lease + window).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  return 0 -- completed
end
local f = redis.call('HMGET', KEYS[1], 's', 'o', 'u')
if f[1] ~= 'l' or f[2] ~= ARGV[1] or tonumber(f[3]) <= now then
  return 0
end
redis.call('HSET', KEYS[1], 'u', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
