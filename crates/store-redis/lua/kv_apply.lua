-- On a Redis Cluster, step 3 of a commit with state (kv/mod.rs): applies one bucket's writes
-- of a completed run, once per key. KEYS[1] the marker 'BUCKET#applied:RECORD', KEYS[2..] the
-- bucket's keys; ARGV[1] how long to keep the marker (the dedup window, ms), ARGV[2] the
-- fencing token of the run, ARGV[3..] the operations (kv.lua). Returns 1 when applied now, 0
-- when a run of the key had applied its writes already.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
kv_apply(3, now)
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return 1
