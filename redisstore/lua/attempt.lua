-- Count an attempt that starts (ARGV[2] = '1') or ends cleanly ('0').
-- KEYS: 1 attempt count. ARGV: 1 retention ms, 2 start or end.
-- Returns the attempts started before this one and not ended, for a start.
if ARGV[2] == '1' then
  local n = redis.call('INCR', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return n - 1
end
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) end
return 0
