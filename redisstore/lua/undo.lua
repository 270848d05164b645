-- Undo a Deduplicator check that gave up: delete the key if it still holds the check's
-- token, so that the message's redelivery is checked afresh.
-- KEYS: 1 the key. ARGV: 1 the check's token. Returns 1 if deleted.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
