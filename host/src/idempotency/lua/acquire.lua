-- Take a lease on a key, unless it is completed or leased by someone else.
-- KEYS[1] the record (hash: state, owner, fence, outbox); KEYS[2] the fencing counter;
-- KEYS[3] the count of failed runs.
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] fencing counter lifetime ms.
-- All keys carry the same {hash tag}, so this touches one cluster slot.
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'completed' then
  -- The outbox, and how many ms ago it was committed (a completer still sending, or one that
  -- crashed before confirming).
  local f = redis.call('HMGET', KEYS[1], 'outbox', 'outbox_at', 'digest')
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return {'completed', f[1] or '', tostring(now - (tonumber(f[2]) or now)), f[3] or ''}
elseif state == 'leased' then
  return {'busy', tostring(redis.call('PTTL', KEYS[1]))}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'leased', 'owner', ARGV[1], 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'granted', tostring(fence), redis.call('GET', KEYS[3]) or '0'}
