-- Forget a key: delete what its commit stored, its started attempts and its lease, and
-- record this Forget's token as the claim's generation, which a delivery in flight
-- compares at commit: it claimed before the Forget, so its commit is refused
-- (ErrLeaseLost) and the next delivery processes the message. The waiters are woken.
-- KEYS: 1 claim hash, 2 lease, 3 started attempts, 4 waiters, 5 release list
-- ARGV: 1 Forget token, 2 retention ms, 3 lease ms
-- Returns 1 if a committed key was deleted, else 0; a resent Forget finds its token and
-- returns the first run's answer.
if redis.call('HGET', KEYS[1], 'g') == ARGV[1] then
  return tonumber(redis.call('HGET', KEYS[1], 'x'))
end
local found = redis.call('HEXISTS', KEYS[1], 't')
redis.call('HDEL', KEYS[1], 't', 'f', 'o', 'k', 'e')
redis.call('HSET', KEYS[1], 'g', ARGV[1], 'x', found)
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'NX')
redis.call('DEL', KEYS[2], KEYS[3])
local waiters = redis.call('SCARD', KEYS[4])
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[5], '1') end
  redis.call('PEXPIRE', KEYS[5], ARGV[3])
  redis.call('DEL', KEYS[4])
end
return found
