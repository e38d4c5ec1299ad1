-- On a Redis Cluster, step 1 of a commit with state (kv/mod.rs): whether one bucket's reads
-- still hold what was seen. KEYS the bucket's keys; ARGV[1..] its operations (kv.lua).
if kv_check(1) then
  return 1
end
return 0
