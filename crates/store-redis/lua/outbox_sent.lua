-- Forget a completed key's outbox once it has been sent: the record becomes the string
-- 'c:TOKEN' (or 'c:TOKEN:DIGEST'), for the rest of its window. KEYS[1] the record.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 1
end
local f = redis.call('HMGET', KEYS[1], 's', 'f', 'd')
local ttl = redis.call('PTTL', KEYS[1])
if f[1] ~= 'c' or ttl <= 0 then
  return 1
end
local done = 'c:' .. f[2]
if f[3] then
  done = done .. ':' .. f[3]
end
redis.call('SET', KEYS[1], done, 'PX', ttl)
return 1
