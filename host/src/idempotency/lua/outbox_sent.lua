-- Forget a completed key's outbox once it has been sent. KEYS[1] the record.
if redis.call('HGET', KEYS[1], 'state') == 'completed' then
  redis.call('HDEL', KEYS[1], 'outbox', 'outbox_at')
end
return 1
