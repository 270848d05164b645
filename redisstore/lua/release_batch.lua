-- Release a batch's claims without committing (a rollback), as release.lua releases
-- one: drop each lease this delivery still holds, and wake its waiters.
-- KEYS: 3 per key: claim hash, lease, release list
-- ARGV: 1 lease token, 2 lease ms
local n = #KEYS / 3
for i = 1, n do
  local c, l, r = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('GET', l) == ARGV[1] then
    redis.call('DEL', l)
    local waiters = tonumber(redis.call('HGET', c, 'w') or '0')
    if waiters > 0 then
      redis.call('HSET', c, 'w', 0)
      for _ = 1, waiters do redis.call('RPUSH', r, '1') end
      redis.call('PEXPIRE', r, ARGV[2])
    end
  end
end
return 1
