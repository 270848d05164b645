-- Release a claim without committing (a rollback): drop the lease if this delivery still
-- holds it, and wake the waiters. The fence counter stays.
-- KEYS: 1 claim key, 2 release list
-- ARGV: 1 lease token, 2 lease ms
-- Returns 1 if the lease was held, 0 if it had been taken over or committed.
local h = redis.call('HMGET', KEYS[1], 'l', 'w', 't')
if h[1] ~= ARGV[1] or h[3] then
  return 0
end
redis.call('HDEL', KEYS[1], 'l', 'e', 'w')
local waiters = tonumber(h[2] or '0')
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[2], '1') end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
