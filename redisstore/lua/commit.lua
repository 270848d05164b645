-- Commit a claim: if this delivery still holds the lease (no other delivery took the
-- key since), run the handler's queued commands, store the key's time, fingerprint and
-- output in the claim hash, and wake the waiters. All in one script, so nothing else
-- runs in between. A lease that expired but was not taken over still commits: no other
-- delivery applied anything.
-- KEYS: 1 claim key, 2 release list, 3.. the handler's keys (declared for Redis Cluster;
-- the script reaches them through the commands' own arguments)
-- ARGV: 1 lease token, 2 retention ms, 3 lease ms, 4 fingerprint, 5 '1' if there is one,
-- 6 output, 7 '1' if there is one, 8 number of commands, then per command its argument
-- count and its arguments.
-- Returns {0} when the lease was taken over (nothing applied), else {1, errors...}: the
-- commands that failed at run time (Redis rolls nothing back, so the others are
-- applied). A retry of a commit that ran returns {1}: the key keeps its lease token.
local h = redis.call('HMGET', KEYS[1], 'l', 'k', 'w')
if h[2] == ARGV[1] then
  return {1} -- a retry (go-redis resends on a broken connection) of a commit that ran
end
if h[1] ~= ARGV[1] or h[2] then
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
local fields = {'t', now[1] * 1000 + math.floor(now[2] / 1000), 'k', ARGV[1], 'w', 0}
if ARGV[5] == '1' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[4] end
if ARGV[7] == '1' then fields[#fields + 1] = 'o'; fields[#fields + 1] = ARGV[6] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local waiters = tonumber(h[3] or '0')
if waiters > 0 then
  for _ = 1, waiters do redis.call('RPUSH', KEYS[2], '1') end
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return result
