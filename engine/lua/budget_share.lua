-- One broker's round of cluster-wide budgets: record its demand, hand out its shares.
-- The same arithmetic as engine/budgets.py (the reference model); the protocol is
-- docs/internals/cluster-budgets-protocol.md.
--
-- KEYS[1] qb:{C}:scope  (scope field -> 'cluster', and '#version')
-- KEYS[2] qb:{C}:brokers (broker id -> ms of its last round)
-- KEYS[3..] qb:{C}:b:<budget id>, one per reported budget
-- ARGV[1] broker id, ARGV[2] lease ms, ARGV[3] floor fraction, ARGV[4] headroom,
-- ARGV[5] now ms ('' = Redis's clock), ARGV[6] the scope version the broker holds ('' = none),
-- then per budget: scope field, budget, demand, saturated (1/0).
-- Returns {now_ms, scope version, scope fields (empty when the broker's version is current), shares}.

local broker = ARGV[1]
local lease = tonumber(ARGV[2])
local floor_fraction = tonumber(ARGV[3])
local headroom = tonumber(ARGV[4])
local now
if ARGV[5] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[5])
end

local version = redis.call('HGET', KEYS[1], '#version') or ''
local scope = {}
if version ~= ARGV[6] then
  local all = redis.call('HKEYS', KEYS[1])
  for _, f in ipairs(all) do
    if f ~= '#version' then
      scope[#scope + 1] = f
    end
  end
  table.sort(scope)
end
redis.call('HSET', KEYS[2], broker, now)

-- Each live broker's target share (budgets.targets).
local function targets(budget, ids, demand, saturated)
  local n = #ids
  local floor = budget * floor_fraction / n
  local need = {}
  local total = 0.0
  for _, id in ipairs(ids) do
    if saturated[id] then
      need[id] = math.huge
    else
      need[id] = math.max(floor, demand[id] * (1 + headroom))
    end
    total = total + need[id]
  end
  local out = {}
  if total <= budget then
    local spare = (budget - total) / n
    for _, id in ipairs(ids) do
      out[id] = need[id] + spare
    end
    return out, floor
  end
  local order = {}
  for i, id in ipairs(ids) do
    order[i] = id
  end
  table.sort(order, function(a, b)
    if need[a] ~= need[b] then
      return need[a] < need[b]
    end
    return a < b
  end)
  local remaining = budget
  local left = n
  for i, id in ipairs(order) do
    local level = remaining / left
    if need[id] <= level then
      out[id] = need[id]
      remaining = remaining - need[id]
      left = left - 1
    else
      for j = i, n do
        out[order[j]] = level
      end
      break
    end
  end
  return out, floor
end

local me = tonumber(broker)
local shares = {}
for i = 3, #KEYS do
  local a = 7 + (i - 3) * 4
  local key = KEYS[i]
  if redis.call('HEXISTS', KEYS[1], ARGV[a]) == 0 then
    redis.call('DEL', key)  -- not cluster-wide (any more): the broker enforces the value per broker
    shares[#shares + 1] = ''
  else
    local budget = tonumber(ARGV[a + 1])
    redis.call('HSET', key, 'B', ARGV[a + 1], 'd:' .. broker, ARGV[a + 2], 'x:' .. broker, ARGV[a + 3],
      't:' .. broker, now)
    local flat = redis.call('HGETALL', key)
    local fields = {}
    for j = 1, #flat, 2 do
      fields[flat[j]] = flat[j + 1]
    end
    local ids = {}
    local demand, saturated, held = {}, {}, {}
    for name, value in pairs(fields) do
      local id = string.match(name, '^t:(%-?%d+)$')
      if id then
        local b = tonumber(id)
        if now - tonumber(value) > lease then
          -- its lease ran out: its share returns to the pool
          redis.call('HDEL', key, 'd:' .. id, 'x:' .. id, 't:' .. id, 's:' .. id)
        else
          ids[#ids + 1] = b
          demand[b] = tonumber(fields['d:' .. id])
          saturated[b] = fields['x:' .. id] == '1'
          held[b] = fields['s:' .. id] and tonumber(fields['s:' .. id])
        end
      end
    end
    table.sort(ids)
    local target, floor = targets(budget, ids, demand, saturated)
    local others = 0.0
    for _, b in ipairs(ids) do
      if b ~= me and held[b] then
        others = others + held[b]
      end
    end
    -- budgets.next_share: down at once, up only from what the others released, never below what it holds
    local mine = held[me] or budget / #ids
    local share
    if target[me] <= mine then
      share = math.max(floor, target[me])
    else
      share = math.max(floor, mine, math.min(target[me], budget - others))
    end
    local text = string.format('%.17g', share)
    redis.call('HSET', key, 's:' .. broker, text)
    redis.call('PEXPIRE', key, lease * 3)
    shares[#shares + 1] = text
  end
end

return {now, version, scope, shares}
