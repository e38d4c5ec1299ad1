-- One GCRA step for a plugin's rate limit (see idempotency::rate, whose `decide` is the same
-- arithmetic). KEYS[1] the plugin's TAT in microseconds. ARGV[1] interval us, ARGV[2]
-- tolerance us, ARGV[3] the longest wait that reserves a slot, us.
-- Returns {1, wait_us} with the slot reserved, or {0, wait_us} with nothing reserved.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, tolerance, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local wait = tat - tolerance - now
if wait < 0 then
  wait = 0
end
if wait > most then
  return {0, wait}
end
local next_tat = tat + interval
-- Kept until it no longer matters: once `now` passes it, it counts for nothing.
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.floor((next_tat - now) / 1000) + 1000)
return {1, wait}
