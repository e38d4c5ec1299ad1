-- Give a flow slot back. KEYS[1] the key's slots, ARGV[1] the holder's token.
return redis.call('ZREM', KEYS[1], ARGV[1])
