-- Claim a key nobody has run: mark it completed with its outbox in one step, unless the store
-- knows it already (completed, or leased and not lapsed). KEYS[1] the record (see redis.rs for
-- its fields). ARGV[1] the window ms; ARGV[2] the pending outbox ('' for none).
-- Returns {'won'}, or {'taken', pending outbox, ms since it was committed}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  return {'taken', '', '0'}
end
if kind == 'hash' then
  local f = redis.call('HMGET', KEYS[1], 's', 'b', 't', 'u')
  if f[1] == 'c' then
    return {'taken', f[2] or '', tostring(now - (tonumber(f[3]) or now))}
  end
  if f[1] == 'l' and tonumber(f[4]) > now then
    return {'taken', '', '0'}
  end
end
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], 'c:1', 'PX', ARGV[1])
  return {'won'}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'c', 'f', 1, 'b', ARGV[2], 't', now)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {'won'}
