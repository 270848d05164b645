-- Release a claim without committing: drop the lease if this delivery still holds it,
-- end its attempt (a rollback: a clean failure) unless it is abandoned (a panic), and
-- wake the waiters; all at once, so that no waiter claims the key in between and
-- counts a clean failure as an attempt that died.
-- KEYS: 1 lease, 2 waiters, 3 release list, 4 started attempts
-- ARGV: 1 lease token, 2 lease ms, 3 the attempt to end ('' for none)
-- Returns 1 if the lease was held, 0 if it had expired, been taken over or released by a
-- first run of this script (a resend wakes nobody twice).
if ARGV[3] ~= '' then
  redis.call('SREM', KEYS[4], ARGV[3])
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
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
