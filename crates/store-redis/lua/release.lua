-- Give a lease back, if ARGV[1] still owns it and it has not lapsed, counting the run; the
-- record stays (released), so the next grant's fencing token is still higher.
-- KEYS[1] the record. ARGV[2] 'failed' (one more), 'gave-up' (forget the count) or 'not-run';
-- ARGV[3] the record's lifetime ms after a failed run.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  return 0 -- completed
end
local f = redis.call('HMGET', KEYS[1], 's', 'o', 'u')
if f[1] ~= 'l' or f[2] ~= ARGV[1] or tonumber(f[3]) <= now then
  return 0
end
redis.call('HDEL', KEYS[1], 'o', 'u')
redis.call('HSET', KEYS[1], 's', 'r')
if ARGV[2] == 'failed' then
  redis.call('HINCRBY', KEYS[1], 'n', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif ARGV[2] == 'gave-up' then
  redis.call('HDEL', KEYS[1], 'n')
end
return 1
