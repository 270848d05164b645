-- Release a claim without committing (a rollback): drop the lease if this delivery still
-- holds it, and wake the waiters.
-- KEYS: 1 claim hash, 2 lease, 3 release list
-- ARGV: 1 lease token, 2 lease ms
-- Returns 1 if the lease was held, 0 if it had expired or been taken over.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
local waiters = tonumber(redis.call('HGET', KEYS[1], 'w') or '0')
if waiters > 0 then
  redis.call('HSET', KEYS[1], 'w', 0)
  for _ = 1, waiters do redis.call('RPUSH', KEYS[3], '1') end
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
return 1
