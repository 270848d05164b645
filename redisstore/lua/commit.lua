-- Commit a claim: if this delivery still holds the lease, or it expired and nobody else
-- holds it (then no other delivery applied anything), run the handler's queued commands, store the key's time, fingerprint and output in the claim hash, drop the
-- lease and wake the waiters. All in one script, so nothing else runs in between.
-- KEYS: 1 claim hash, 2 lease, 3 release list, 4.. the handler's keys (declared for Redis
-- Cluster; the script reaches them through the commands' own arguments)
-- ARGV: 1 lease token, 2 retention ms, 3 lease ms, 4 fingerprint, 5 '1' if there is one,
-- 6 output, 7 '1' if there is one, 8 number of commands, 9 the committing process's time
-- (Unix ms, for Stats), then per command its argument count and its arguments.
-- Returns {0} when another delivery holds the lease or committed (nothing applied), else {1, errors...}: the commands
-- that failed at run time (Redis rolls nothing back, so the others are applied). A retry
-- of a commit that ran (go-redis resends on a broken connection) returns {1}: the key
-- keeps the lease token that committed it.
local h = redis.call('HMGET', KEYS[1], 'k', 'w')
if h[1] == ARGV[1] then
  return {1}
end
local lease = redis.call('GET', KEYS[2])
if h[1] or (lease and lease ~= ARGV[1]) then
  return {0} -- committed by another, or another holds the lease
end
local result = {1}
local i = 10
for c = 1, tonumber(ARGV[8]) do
  local argc = tonumber(ARGV[i])
  local reply = redis.pcall(unpack(ARGV, i + 1, i + argc))
  if type(reply) == 'table' and reply.err then
    result[#result + 1] = 'command ' .. c .. ' (' .. ARGV[i + 1] .. '): ' .. reply.err
  end
  i = i + 1 + argc
end
local fields = {'t', ARGV[9], 'k', ARGV[1], 'w', 0}
if ARGV[5] == '1' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[4] end
if ARGV[7] == '1' then fields[#fields + 1] = 'o'; fields[#fields + 1] = ARGV[6] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2])
local waiters = tonumber(h[2] or '0')
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[3], '1') end
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return result
