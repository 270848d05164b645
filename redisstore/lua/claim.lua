-- Claim one key. Everything about a claim lives in one hash, the claim key: t, f, o, k
-- once committed (time, fingerprint, output, the committing lease token); l, e, n, w
-- while claimed (the lease token "<fence>:<owner>", its expiry in server ms, the fence
-- counter, the waiter count).
-- KEYS: 1 claim key
-- ARGV: 1 owner token (random), 2 lease ms, 3 retention ms
-- Returns {1, fingerprint|nil, output|nil} for a committed key, {2, lease ms left} for a
-- held one (the caller is counted as a waiter), {0, fence} for a new claim, or for a
-- retried claim (go-redis resends on a broken connection) whose lease this owner holds.
local h = redis.call('HMGET', KEYS[1], 't', 'f', 'o', 'l', 'e', 'n')
if h[1] then
  return {1, h[2], h[3]}
end
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
if h[4] then
  local fence, owner = string.match(h[4], '^(%d+):(.*)$')
  if owner == ARGV[1] then
    return {0, tonumber(fence)}
  end
  local left = tonumber(h[5]) - ms
  if left > 0 then
    redis.call('HINCRBY', KEYS[1], 'w', 1)
    return {2, left}
  end
end
local fence = tonumber(h[6] or '0') + 1
redis.call('HSET', KEYS[1], 'l', fence .. ':' .. ARGV[1], 'e', ms + tonumber(ARGV[2]), 'n', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {0, fence}
