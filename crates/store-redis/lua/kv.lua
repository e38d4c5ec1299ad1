-- Handler state (see kv/mod.rs), the part every state script shares. A commit's operations
-- are ARGV from position p: their count, then six values each:
--   kind: 'r' a key read (check it still holds what was seen), 's' set, 'd' delete, 'a' add;
--   the index in KEYS of the key's value ('BUCKET:KEY', a string);
--   the index in KEYS of its bucket's index (a sorted set of the bucket's keys by expiry);
--   the key's name in its bucket;
--   r: the sha1 of the value seen ('' when absent); s: the value; a: the delta; d: '';
--   the time to live in ms ('0': none).
local function kv_counter(v)
  return v == false or (#v <= 19 and string.match(v, '^%d+$') ~= nil and tonumber(v) <= 1e18)
end

-- Whether every read still holds what was seen and every counter added to is one.
local function kv_check(p)
  for i = 0, tonumber(ARGV[p]) - 1 do
    local q = p + 1 + i * 6
    local kind = ARGV[q]
    if kind == 'r' or kind == 'a' then
      local v = redis.call('GET', KEYS[tonumber(ARGV[q + 1])])
      if kind == 'a' then
        if not kv_counter(v) then
          return false
        end
      elseif ARGV[q + 4] == '' then
        if v then
          return false
        end
      elseif not v or redis.sha1hex(v) ~= ARGV[q + 4] then
        return false
      end
    end
  end
  return true
end

-- Applies the writes; `now` in ms. Expired members leave their bucket's index here.
local function kv_apply(p, now)
  for i = 0, tonumber(ARGV[p]) - 1 do
    local q = p + 1 + i * 6
    local kind = ARGV[q]
    if kind ~= 'r' then
      local vk, ik, member, ttl = KEYS[tonumber(ARGV[q + 1])], KEYS[tonumber(ARGV[q + 2])], ARGV[q + 3], tonumber(ARGV[q + 5])
      if kind == 'd' then
        redis.call('DEL', vk)
        redis.call('ZREM', ik, member)
      else
        if kind == 's' then
          redis.call('SET', vk, ARGV[q + 4])
        else
          redis.call('INCRBY', vk, ARGV[q + 4])
        end
        if ttl > 0 then
          redis.call('PEXPIRE', vk, ttl)
          redis.call('ZADD', ik, now + ttl, member)
          local left = redis.call('PTTL', ik)
          if left < ttl then
            redis.call('PEXPIRE', ik, ttl)
          end
        else
          redis.call('PERSIST', vk)
          redis.call('ZADD', ik, '+inf', member)
          redis.call('PERSIST', ik)
        end
      end
      redis.call('ZREMRANGEBYSCORE', ik, '-inf', now)
    end
  end
end
