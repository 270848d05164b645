-- Commit a claim: if this delivery still holds the lease, or it expired and nobody else
-- holds it (then no other delivery applied anything), and no Forget ran since the claim,
-- run the handler's queued commands, store the key's time, fingerprint, output and the
-- commands that failed in the claim hash, end the key's attempts, drop the lease and
-- wake the waiters. All in one script, so nothing else runs in between.
-- KEYS: 1 claim hash, 2 lease, 3 release list, 4 waiters, 5 started attempts, 6.. the
-- handler's keys (declared for Redis Cluster; the script reaches them through the
-- commands' own arguments)
-- ARGV: 1 lease token, 2 retention ms, 3 lease ms, 4 fingerprint, 5 '1' if there is one,
-- 6 output, 7 '1' if there is one, 8 number of commands, 9 the committing process's time
-- (Unix ms, for Stats), 10 the claim's generation (the last Forget's token as the claim
-- read it, '' if none; '*' for a message processed without a claim), then per command
-- its argument count and its arguments.
-- Returns {0} when another delivery holds the lease or committed, or a Forget ran since
-- the claim (nothing applied), else {1, errors...}: the commands that failed at run time
-- (Redis rolls nothing back, so the others are applied). A resend of a commit that ran
-- (go-redis resends on a broken connection) finds its lease token on the key and
-- returns the first run's answer, errors included.
local h = redis.call('HMGET', KEYS[1], 'k', 'e', 'g')
if h[1] == ARGV[1] then
  local result = {1}
  if h[2] then
    for _, e in ipairs(cjson.decode(h[2])) do result[#result + 1] = e end
  end
  return result
end
local lease = redis.call('GET', KEYS[2])
if h[1] or (lease and lease ~= ARGV[1]) or (ARGV[10] ~= '*' and (h[3] or '') ~= ARGV[10]) then
  return {0}
end
local errors = {}
local i = 11
for c = 1, tonumber(ARGV[8]) do
  local argc = tonumber(ARGV[i])
  local reply = redis.pcall(unpack(ARGV, i + 1, i + argc))
  if type(reply) == 'table' and reply.err then
    errors[#errors + 1] = 'command ' .. c .. ' (' .. ARGV[i + 1] .. '): ' .. reply.err
  end
  i = i + 1 + argc
end
local fields = {'t', ARGV[9], 'k', ARGV[1]}
if ARGV[5] == '1' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[4] end
if ARGV[7] == '1' then fields[#fields + 1] = 'o'; fields[#fields + 1] = ARGV[6] end
if #errors > 0 then fields[#fields + 1] = 'e'; fields[#fields + 1] = cjson.encode(errors) end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2], KEYS[5])
redis.call('SREM', KEYS[4], ARGV[1])
local waiters = redis.call('SCARD', KEYS[4])
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[3], '1') end
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  redis.call('DEL', KEYS[4])
end
local result = {1}
for _, e in ipairs(errors) do result[#result + 1] = e end
return result
