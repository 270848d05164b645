-- Claim the keys of a batch, all or none: if another delivery holds the lease of a key
-- not committed yet, take nothing, count this claim as a waiter of that key (a member of
-- its waiter set, as a waiting single claim is, so that any commit, release or Forget of
-- it wakes this claim) and say which; otherwise take the lease of every key not
-- committed and bump its fencing counter, in one script, so that two overlapping
-- batches never each hold part of the other's keys (no deadlock).
-- KEYS: 3 per key, in order: claim hash, lease, waiters
-- ARGV: 1 lease token, 2 lease ms, 3 retention ms, 4 '1' if the caller waits
-- Returns {0, i, ttl}: key i (1-based) is held, its lease has ttl ms left; nothing taken.
-- Else {1, fence, done_1, value_1, done_2, ...}: done_i is 1 for a committed key, whose
-- value is the fingerprint stored with it (false when none); 0 for a key now this
-- claim's, whose value is its generation (the last Forget's token, '' if none), which
-- the commit compares. fence is the first new key's fencing token (0 when none is new).
-- A key whose lease this token holds already (a resent claim) is ours; a resend counts
-- as one waiter (a set).
local n = #KEYS / 3
for i = 1, n do
  local c, l, w = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('HEXISTS', c, 't') == 0 then
    local held = redis.call('GET', l)
    if held and held ~= ARGV[1] then
      if ARGV[4] == '1' then
        redis.call('SADD', w, ARGV[1])
        redis.call('PEXPIRE', w, ARGV[2])
      end
      return {0, i, redis.call('PTTL', l)}
    end
  end
end
local out = {1, 0}
for i = 1, n do
  local c, l = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local h = redis.call('HMGET', c, 't', 'f', 'g')
  if h[1] then
    out[#out + 1] = 1
    out[#out + 1] = h[2]
  else
    redis.call('SET', l, ARGV[1], 'PX', ARGV[2])
    local fence = redis.call('HINCRBY', c, 'n', 1)
    redis.call('PEXPIRE', c, ARGV[3], 'NX')
    if out[2] == 0 then out[2] = fence end
    out[#out + 1] = 0
    out[#out + 1] = h[3] or ''
  end
end
return out
