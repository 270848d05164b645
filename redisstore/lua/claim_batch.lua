-- Claim the keys of a batch, all or none: if another delivery holds the lease of a key
-- not committed yet, take nothing and say which; otherwise take the lease of every key
-- not committed and bump its fencing counter, in one script, so that two overlapping
-- batches never each hold part of the other's keys (no deadlock).
-- KEYS: 3 per key, in order: claim hash, lease, release list
-- ARGV: 1 lease token, 2 lease ms, 3 retention ms, 4 '1' if the caller waits: it then
-- counts itself as a waiter of the held key, whose commit or release wakes it.
-- Returns {0, i, ttl}: key i (1-based) is held, its lease has ttl ms left; nothing taken.
-- Else {1, fence, done_1, fingerprint_1, done_2, ...}: done_i is 1 for a committed key,
-- with the fingerprint stored with it (false when none); fence is the first new key's
-- fencing token (0 when none is new). A key whose lease this token holds already (a
-- resent claim) is ours.
local n = #KEYS / 3
for i = 1, n do
  local c, l = KEYS[3 * i - 2], KEYS[3 * i - 1]
  if redis.call('HEXISTS', c, 't') == 0 then
    local held = redis.call('GET', l)
    if held and held ~= ARGV[1] then
      if ARGV[4] == '1' then
        redis.call('HINCRBY', c, 'w', 1)
        redis.call('PEXPIRE', c, ARGV[3], 'NX')
      end
      return {0, i, redis.call('PTTL', l)}
    end
  end
end
local out = {1, 0}
for i = 1, n do
  local c, l = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local h = redis.call('HMGET', c, 't', 'f')
  if h[1] then
    out[#out + 1] = 1
    out[#out + 1] = h[2]
  else
    redis.call('SET', l, ARGV[1], 'PX', ARGV[2])
    local fence = redis.call('HINCRBY', c, 'n', 1)
    redis.call('PEXPIRE', c, ARGV[3], 'NX')
    if out[2] == 0 then out[2] = fence end
    out[#out + 1] = 0
    out[#out + 1] = false
  end
end
return out
