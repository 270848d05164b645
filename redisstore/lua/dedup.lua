-- Check a Deduplicator key: store this check's token for the window unless the key is
-- another check's.
-- KEYS: 1 the key
-- ARGV: 1 this check's token, 2 window ms, 3.. tokens of this process's checks of the
-- key that gave up (a timeout, a broken connection) and may have stored it
-- Returns 0 when the key is this check's: new, found with this check's token (a resend
-- of this check: the first run's answer), or found with the token of a check that gave
-- up (it answered nobody, so its key is taken over); 1 for a duplicate.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  return 0
end
if v then
  local abandoned = false
  for i = 3, #ARGV do
    if v == ARGV[i] then abandoned = true end
  end
  if not abandoned then
    return 1
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
