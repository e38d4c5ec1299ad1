-- Mark a leased key completed, with its outbox, if ARGV[1] still owns it.
-- KEYS[1] the record; KEYS[2] the fencing counter; KEYS[3] the count of failed runs.
-- ARGV[2] dedup window ms; ARGV[3] outbox JSON ('' for none); ARGV[4] counter lifetime ms;
-- ARGV[5] the sha256 of the body that ran ('' if not known).
local f = redis.call('HMGET', KEYS[1], 'state', 'owner')
if f[1] ~= 'leased' or f[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'completed')
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'digest', ARGV[5])
end
redis.call('HDEL', KEYS[1], 'owner')
if ARGV[3] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'outbox', ARGV[3], 'outbox_at', now)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- The counter outlives the record, so the next grant's token is still higher.
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('DEL', KEYS[3])
return 1
