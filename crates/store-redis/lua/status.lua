-- What the store holds for a key: {state, owner, fence, outbox}, where a lapsed lease reads as
-- released. KEYS[1] the record.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  return {'c', '', string.match(redis.call('GET', KEYS[1]), '^c:(%d+)') or '0', ''}
end
local f = redis.call('HMGET', KEYS[1], 's', 'o', 'f', 'b', 'u')
local state = f[1] or ''
if state == 'l' and tonumber(f[5]) <= now then
  state = 'r'
end
return {state, f[2] or '', f[3] or '0', f[4] or ''}
