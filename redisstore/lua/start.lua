-- Record that a delivery holding the key's lease starts an attempt (Config.MaxAttempts),
-- and count the attempts that started before it and never ended. It is sent in the
-- claim pipeline after the SET of the lease, and records nothing unless that SET (or the
-- one of a resent pipeline) gave this delivery the lease and the key is not committed:
-- waiting duplicates and duplicates are not attempts.
-- KEYS: 1 started attempts (a set of attempt tokens), 2 lease, 3 claim hash
-- ARGV: 1 lease token, 2 attempt token, 3 retention ms
-- Returns the earlier attempts that never ended, or -1 when nothing was recorded. A set
-- counts a resent start once; the set expires with the claim hash, so it never
-- outlives the key.
if redis.call('GET', KEYS[2]) ~= ARGV[1] or redis.call('HEXISTS', KEYS[3], 't') == 1 then
  return -1
end
redis.call('SADD', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[3])
if ttl < 0 then ttl = tonumber(ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('SCARD', KEYS[1]) - 1
