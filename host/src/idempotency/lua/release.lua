-- Give a lease back, if ARGV[1] still owns it. KEYS[1] the record.
local f = redis.call('HMGET', KEYS[1], 'state', 'owner')
if f[1] ~= 'leased' or f[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
