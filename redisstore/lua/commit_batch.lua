-- Commit a batch's claims, as commit.lua commits one: if this delivery still holds the
-- lease of every new key (or it expired and nobody else took it, committed or holds it),
-- run the handler's queued commands once, store each key's time and fingerprint, drop
-- the leases and wake the waiters. All in one script.
-- KEYS: 3 per new key (claim hash, lease, release list), then the handler's keys
-- (declared for Redis Cluster).
-- ARGV: 1 lease token, 2 retention ms, 3 lease ms, 4 number of new keys, 5 the
-- committing process's time (Unix ms), 6 number of commands, then per key its
-- fingerprint and '1' if there is one, then per command its argument count and its
-- arguments.
-- Returns {0} when another delivery holds or committed one of the keys (nothing
-- applied), else {1, errors...} as commit.lua. A retry of a commit that ran returns {1}.
local n = tonumber(ARGV[4])
if redis.call('HGET', KEYS[1], 'k') == ARGV[1] then
  return {1}
end
for i = 1, n do
  local c, l = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local lease = redis.call('GET', l)
  if redis.call('HEXISTS', c, 't') == 1 or (lease and lease ~= ARGV[1]) then
    return {0}
  end
end
local result = {1}
local a = 7 + 2 * n
for c = 1, tonumber(ARGV[6]) do
  local argc = tonumber(ARGV[a])
  local reply = redis.pcall(unpack(ARGV, a + 1, a + argc))
  if type(reply) == 'table' and reply.err then
    result[#result + 1] = 'command ' .. c .. ' (' .. ARGV[a + 1] .. '): ' .. reply.err
  end
  a = a + 1 + argc
end
for i = 1, n do
  local c, l, r = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local waiters = tonumber(redis.call('HGET', c, 'w') or '0')
  local fields = {'t', ARGV[5], 'k', ARGV[1], 'w', 0}
  if ARGV[6 + 2 * i] == '1' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[5 + 2 * i] end
  redis.call('HSET', c, unpack(fields))
  redis.call('PEXPIRE', c, ARGV[2])
  redis.call('DEL', l)
  if waiters > 0 then
    for _ = 1, waiters do redis.call('RPUSH', r, '1') end
    redis.call('PEXPIRE', r, ARGV[3])
  end
end
return result
