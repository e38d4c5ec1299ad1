-- Take a lease on a key, unless it is completed or leased by someone else whose lease has not
-- lapsed. KEYS[1] the record (see redis.rs for its fields); KEYS[2] the fencing counter of the
-- earlier layout (one key beside the record), read once and folded into the record.
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] the record's lifetime ms (lease + window).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  -- A completed key whose outbox is sent: 'c:TOKEN' or 'c:TOKEN:DIGEST'.
  local digest = string.match(redis.call('GET', KEYS[1]), '^c:%d+:(%x+)$')
  return {'completed', '', '0', digest or ''}
end
local f = redis.call('HMGET', KEYS[1], 's', 'u', 'b', 't', 'd', 'n')
if not f[1] then
  -- A record of the earlier layout (long field names, its lease the key's TTL) is honoured.
  local old = redis.call('HMGET', KEYS[1], 'state', 'outbox', 'outbox_at', 'digest')
  if old[1] == 'completed' then
    return {'completed', old[2] or '', tostring(now - (tonumber(old[3]) or now)), old[4] or ''}
  elseif old[1] == 'leased' then
    return {'busy', tostring(redis.call('PTTL', KEYS[1]))}
  end
  local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
  if counter > 0 then
    redis.call('HSET', KEYS[1], 'f', counter)
    redis.call('DEL', KEYS[2])
  end
end
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
