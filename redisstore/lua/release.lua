-- Release a claim without committing (a rollback): if this delivery still holds the
-- lease, drop it and wake the waiters; or, for a delivery whose attempt is counted
-- (MaxAttempts), keep it for a short grace, until EndAttempt (end.lua) drops it, so that
-- no waiter claims the key between the rollback and the end of the attempt and counts a
-- clean failure as an attempt that died. A delivery that never ends its attempt (its
-- process died after a panic) leaves the lease to expire after the grace.
-- KEYS: 1 lease, 2 waiters, 3 release list
-- ARGV: 1 lease token, 2 lease ms, 3 grace ms (0: release now)
-- Returns 1 if the lease was held, 0 if it had expired, been taken over or released by a
-- first run of this script (a resend wakes nobody twice).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3], 'LT')
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
local waiters = redis.call('SCARD', KEYS[2])
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[3], '1') end
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('DEL', KEYS[2])
end
return 1
