-- Claim one key: report a committed key, or a lease another delivery holds, or take the
-- lease with a fresh fencing token.
-- KEYS: 1 done, 2 lease, 3 fence counter, 4 waiter count
-- ARGV: 1 owner token (random), 2 lease ms, 3 retention ms
-- Returns {1, fingerprint|nil, output|nil} for a committed key, {2, lease ms left} for a
-- held one (the caller is counted as a waiter), {0, fence} for a new claim, or for a
-- retried claim whose lease this owner already holds.
local done = redis.call('HMGET', KEYS[1], 't', 'f', 'o')
if done[1] then
  return {1, done[2], done[3]}
end
local held = redis.call('GET', KEYS[2])
if held then
  local fence, owner = string.match(held, '^(%d+):(.*)$')
  if owner == ARGV[1] then
    return {0, tonumber(fence)} -- a retry (go-redis retries on a broken connection): ours
  end
  local ttl = redis.call('PTTL', KEYS[2])
  redis.call('INCR', KEYS[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  return {2, ttl}
end
local fence = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('SET', KEYS[2], fence .. ':' .. ARGV[1], 'PX', ARGV[2])
return {0, fence}
