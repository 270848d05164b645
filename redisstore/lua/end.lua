-- End an attempt that did not commit (Config.MaxAttempts): remove its token from the
-- started attempts and, if its delivery still holds the lease (the lease token is the
-- attempt token), drop it and wake the waiters.
-- KEYS: 1 started attempts, 2 lease, 3 waiters, 4 release list
-- ARGV: 1 attempt token, 2 lease ms
-- Returns 1 if the lease was dropped. A resend, or the end of an attempt never recorded,
-- changes nothing.
redis.call('SREM', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
local waiters = redis.call('SCARD', KEYS[3])
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[4], '1') end
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  redis.call('DEL', KEYS[3])
end
return 1
