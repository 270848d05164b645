-- Release a batch's claims without committing (a rollback), as release.lua releases
-- one: drop each lease this delivery still holds and wake the key's waiters, all at
-- once. A batch starts no attempts (inbox.ProcessBatch refuses MaxAttempts), so it ends
-- none.
-- KEYS: 3 per key: lease, waiters, release list
-- ARGV: 1 lease token, 2 lease ms
-- Returns the number of leases dropped; a resend finds none held and wakes nobody twice.
local n = #KEYS / 3
local dropped = 0
for i = 1, n do
  local l, w, r = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('GET', l) == ARGV[1] then
    redis.call('DEL', l)
    dropped = dropped + 1
    redis.call('SREM', w, ARGV[1])
    local waiters = redis.call('SCARD', w)
    if waiters > 0 then
      for _ = 1, waiters do redis.call('RPUSH', r, '1') end
      redis.call('PEXPIRE', r, ARGV[2])
      redis.call('DEL', w)
    end
  end
end
return dropped
