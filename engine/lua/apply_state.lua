-- Bring one namespace to a desired-state version, atomically: quotas, broker configs, topic replica lists and
-- client-metrics subscriptions, each in its own hash with its own version and pub/sub channel.
--
-- KEYS: 1 desired-version, 2 push log,
--       3/4 config hash/version, 5/6 broker-configs, 7/8 replication-throttles, 9/10 client-metrics
-- ARGV: 1 namespace, 2 version, 3 base, 4 mode ('delta' | 'full' | 'force'), 5 broker id ('' = cluster-wide),
--       6..9 the number of changes per store (config, broker-configs, replication-throttles, client-metrics),
--       then per store field, op pairs where op is '=' .. value (set) or '-' (delete).
-- Returns {1, version} applied; {0, held} the namespace already holds this version or a later one;
--         {-1, held} a delta whose base the namespace does not hold (it lost state): push it whole.

local version = tonumber(ARGV[2])
local base = tonumber(ARGV[3])
local mode = ARGV[4]
local held = tonumber(redis.call('GET', KEYS[1]) or '-1')

if mode ~= 'force' and version <= held then return {0, held} end
if mode == 'delta' and held < base then return {-1, held} end

local stores = {
  {hash = KEYS[3], ver = KEYS[4], name = 'config'},
  {hash = KEYS[5], ver = KEYS[6], name = 'broker-configs'},
  {hash = KEYS[7], ver = KEYS[8], name = 'replication-throttles'},
  {hash = KEYS[9], ver = KEYS[10], name = 'client-metrics'},
}
local whole = mode ~= 'delta'
local touched = {}
if whole then
  for i = 1, 4 do
    if redis.call('DEL', stores[i].hash) > 0 then touched[i] = true end
  end
end

local at = 10
for i = 1, 4 do
  local n = tonumber(ARGV[5 + i])
  for _ = 1, n do
    local f, op = ARGV[at], ARGV[at + 1]
    if string.sub(op, 1, 1) == '=' then
      redis.call('HSET', stores[i].hash, f, string.sub(op, 2))
    else
      redis.call('HDEL', stores[i].hash, f)
    end
    touched[i] = true
    at = at + 2
  end
end

-- A broker's replication rates: its own value, else the default broker's (Kafka's precedence).
if touched[2] or whole then
  local own = ARGV[5]
  for _, key in ipairs({'leader.replication.throttled.rate', 'follower.replication.throttled.rate',
                        'replica.alter.log.dirs.io.max.bytes.per.second'}) do
    local v = false
    if own ~= '' then v = redis.call('HGET', KEYS[5], own .. '|' .. key) end
    if not v then v = redis.call('HGET', KEYS[5], '<default>|' .. key) end
    local field = 'broker|' .. key
    local before = redis.call('HGET', KEYS[7], field)
    if v and v ~= before then
      redis.call('HSET', KEYS[7], field, v)
      touched[3] = true
    elseif (not v) and before then
      redis.call('HDEL', KEYS[7], field)
      touched[3] = true
    end
  end
end

for i = 1, 4 do
  if touched[i] then
    local v = redis.call('INCR', stores[i].ver)
    redis.call('PUBLISH', 'qe:' .. stores[i].name .. ':' .. ARGV[1], v)
  end
end
redis.call('SET', KEYS[1], version)
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('LPUSH', KEYS[2], held .. ' ' .. version .. ' ' .. mode .. ' ' .. ms)
redis.call('LTRIM', KEYS[2], 0, 9999)
return {1, version}
