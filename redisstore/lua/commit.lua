-- Commit a claim: if this delivery still holds the lease, run the handler's queued
-- commands, store the key with its fingerprint and output, drop the lease and wake the
-- waiters. All in one script, so nothing else runs in between.
-- KEYS: 1 done, 2 lease, 3 waiter count, 4 release list, 5.. the handler's keys (declared
-- for Redis Cluster; the script reaches them through the commands' own arguments)
-- ARGV: 1 lease token, 2 retention ms, 3 lease ms, 4 fingerprint, 5 '1' if there is one,
-- 6 output, 7 '1' if there is one, 8 number of commands, then per command its argument
-- count and its arguments.
-- Returns {0} when the lease is lost (nothing applied), else {1, errors...}: the commands
-- that failed at run time (Redis rolls nothing back, so the others are applied). A retry
-- of a commit that ran returns {1}: the key keeps the lease token that committed it.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  if redis.call('HGET', KEYS[1], 'k') == ARGV[1] then
    return {1} -- a retry (go-redis retries on a broken connection) of a commit that ran
  end
  return {0}
end
local result = {1}
local i = 9
for c = 1, tonumber(ARGV[8]) do
  local argc = tonumber(ARGV[i])
  local reply = redis.pcall(unpack(ARGV, i + 1, i + argc))
  if type(reply) == 'table' and reply.err then
    result[#result + 1] = 'command ' .. c .. ' (' .. ARGV[i + 1] .. '): ' .. reply.err
  end
  i = i + 1 + argc
end
local now = redis.call('TIME')
local fields = {'t', now[1] * 1000 + math.floor(now[2] / 1000), 'k', ARGV[1]}
if ARGV[5] == '1' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[4] end
if ARGV[7] == '1' then fields[#fields + 1] = 'o'; fields[#fields + 1] = ARGV[6] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2])
local waiters = tonumber(redis.call('GET', KEYS[3]) or '0')
if waiters > 0 then
  redis.call('DEL', KEYS[3])
  for _ = 1, waiters do redis.call('RPUSH', KEYS[4], '1') end
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
end
return result
