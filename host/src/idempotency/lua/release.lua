-- Give a lease back, if ARGV[1] still owns it, counting the run.
-- KEYS[1] the record; KEYS[2] the count of failed runs.
-- ARGV[2] 'failed' (one more), 'gave-up' (forget the count) or 'not-run';
-- ARGV[3] the count's lifetime ms.
local f = redis.call('HMGET', KEYS[1], 'state', 'owner')
if f[1] ~= 'leased' or f[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] == 'failed' then
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
elseif ARGV[2] == 'gave-up' then
  redis.call('DEL', KEYS[2])
end
return 1
