-- Take a lease on a key, unless it is completed or leased by someone else whose lease has not
-- lapsed. KEYS[1] the record (see redis.rs for its fields).
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] the record's lifetime ms (lease + window).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', KEYS[1], 's', 'u', 'b', 't', 'd', 'n')
if f[1] == 'c' then
  -- The outbox, and how many ms ago it was committed (a completer still sending, or one that
  -- crashed before confirming).
  return {'completed', f[3] or '', tostring(now - (tonumber(f[4]) or now)), f[5] or ''}
end
if f[1] == 'l' and tonumber(f[2]) > now then
  return {'busy', tostring(tonumber(f[2]) - now)}
end
-- Absent, released, or a lease that lapsed: the fencing token goes on from the record's.
local fence = redis.call('HINCRBY', KEYS[1], 'f', 1)
redis.call('HSET', KEYS[1], 's', 'l', 'o', ARGV[1], 'u', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'granted', tostring(fence), f[6] or '0'}
