-- Forget a completed key's outbox once it has been sent. KEYS[1] the record.
if redis.call('HGET', KEYS[1], 's') == 'c' then
  redis.call('HDEL', KEYS[1], 'b', 't')
end
return 1
