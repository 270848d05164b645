-- Commit a batch's claims, as commit.lua commits one: if this delivery still holds the
-- lease of every new key (or it expired and nobody else took it), no key was committed
-- by another delivery and no Forget ran on any since the claim, run the handler's
-- queued commands once, store each key's time, fingerprint and the commands that
-- failed, end each key's attempts, drop the leases and wake the waiters. All in one
-- script, so nothing else runs in between.
-- KEYS: 5 per new key (claim hash, lease, release list, waiters, started attempts), then
-- the handler's keys (declared for Redis Cluster).
-- ARGV: 1 lease token, 2 retention ms, 3 lease ms, 4 number of new keys, 5 the
-- committing process's time (Unix ms), 6 number of commands, then per key its
-- fingerprint, '1' if there is one, and its generation as the claim read it, then per
-- command its argument count and its arguments.
-- Returns {0} when another delivery holds or committed one of the keys, or a Forget ran
-- on one since the claim (nothing applied), else {1, errors...} as commit.lua. A resend
-- of a commit that ran (go-redis resends on a broken connection) finds its lease token
-- on a key and returns the first run's answer, errors included.
local n = tonumber(ARGV[4])
for i = 1, n do
  local h = redis.call('HMGET', KEYS[5 * i - 4], 'k', 'e')
  if h[1] == ARGV[1] then
    local result = {1}
    if h[2] then
      for _, e in ipairs(cjson.decode(h[2])) do result[#result + 1] = e end
    end
    return result
  end
end
for i = 1, n do
  local c, l = KEYS[5 * i - 4], KEYS[5 * i - 3]
  local h = redis.call('HMGET', c, 't', 'g')
  local lease = redis.call('GET', l)
  if h[1] or (lease and lease ~= ARGV[1]) or (h[2] or '') ~= ARGV[6 + 3 * i] then
    return {0}
  end
end
local errors = {}
local a = 7 + 3 * n
for c = 1, tonumber(ARGV[6]) do
  local argc = tonumber(ARGV[a])
  local reply = redis.pcall(unpack(ARGV, a + 1, a + argc))
  if type(reply) == 'table' and reply.err then
    errors[#errors + 1] = 'command ' .. c .. ' (' .. ARGV[a + 1] .. '): ' .. reply.err
  end
  a = a + 1 + argc
end
local failed = #errors > 0 and cjson.encode(errors) or nil
for i = 1, n do
  local c, l, r, w, s = KEYS[5 * i - 4], KEYS[5 * i - 3], KEYS[5 * i - 2], KEYS[5 * i - 1], KEYS[5 * i]
  local fields = {'t', ARGV[5], 'k', ARGV[1]}
  if ARGV[5 + 3 * i] == '1' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[4 + 3 * i] end
  if failed then fields[#fields + 1] = 'e'; fields[#fields + 1] = failed end
  redis.call('HSET', c, unpack(fields))
  redis.call('PEXPIRE', c, ARGV[2])
  redis.call('DEL', l, s)
  redis.call('SREM', w, ARGV[1])
  local waiters = redis.call('SCARD', w)
  if waiters > 0 then
    for _ = 1, waiters do redis.call('RPUSH', r, '1') end
    redis.call('PEXPIRE', r, ARGV[3])
    redis.call('DEL', w)
  end
end
local result = {1}
for _, e in ipairs(errors) do result[#result + 1] = e end
return result
