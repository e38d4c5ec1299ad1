-- Take over sending a completed key's outbox that has been pending for at least ARGV[1] ms:
-- its pending clock restarts now, so of the callers that find it overdue at once, one sends
-- it. KEYS[1] the record. Returns {pending outbox} to the caller that took it over, {} else.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return {}
end
local f = redis.call('HMGET', KEYS[1], 's', 'b', 't')
if f[1] ~= 'c' or not f[2] or f[2] == '' then
  return {}
end
if now - (tonumber(f[3]) or now) < tonumber(ARGV[1]) then
  return {}
end
redis.call('HSET', KEYS[1], 't', now)
return {f[2]}
