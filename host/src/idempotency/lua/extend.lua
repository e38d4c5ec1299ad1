-- Extend a lease, if ARGV[1] still owns it. KEYS[1] the record; KEYS[2] the fencing counter.
-- ARGV[2] lease ms; ARGV[3] counter lifetime ms (it outlives the record).
local f = redis.call('HMGET', KEYS[1], 'state', 'owner')
if f[1] ~= 'leased' or f[2] ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
