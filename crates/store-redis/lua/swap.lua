-- Replace a shared record (a plugin's rollout) if it still holds what the caller read: the
-- compare-and-set that makes two hosts deciding at once produce one decision.
-- KEYS[1] the record. ARGV[1] '1' when the caller read it absent, else '0'; ARGV[2] the text it
-- read; ARGV[3] the new text; ARGV[4] how long to keep it, ms.
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current then
    return 0
  end
elseif current ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1
