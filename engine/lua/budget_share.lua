-- One broker's round of cluster-wide budgets: record its demand, hand out its shares.
-- The same arithmetic as engine/budgets.py (the reference model); the protocol is
-- docs/internals/cluster-budgets-protocol.md.
--
-- KEYS[1] qb:{C}:scope  (scope field -> 'cluster', and '#version')
-- KEYS[2] qb:{C}:brokers (broker id -> ms of its last round)
-- KEYS[3..] qb:{C}:b:<budget id>, one per reported budget (its state: see load below)
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

-- A budget's state is one string (cmsgpack) of five columns in ascending broker id:
-- {ids, demands, saturated (booleans), last report (ms), held share (false: none yet)}. One GET and one
-- unpack in C cost a report far less than reading and parsing a hash of four fields per broker
-- (docs/benchmarks/results.md, budget_alloc_bench.py).
local function load(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'string' then
    return cmsgpack.unpack(raw)
  end
  if type(raw) == 'table' then
    redis.call('DEL', key)  -- a hash of the layout before this one: its brokers report again within a second
  end
  return {{}, {}, {}, {}, {}}
end

-- This broker's target share (budgets.targets, of which a report needs only its own entry). Needs are summed in
-- ascending broker id and water-filled in ascending need as the model does, so the doubles are the model's: the
-- needs are sorted as plain numbers (ties subtract the same value), and ties at the last need water-filled are
-- broken by broker id, as the model's sort by (need, id) breaks them.
local function target_of(budget, ids, need, total, mine_at)
  local n = #ids
  if total <= budget then
    return need[mine_at] + (budget - total) / n
  end
  local sorted = {}
  for i = 1, n do
    sorted[i] = need[i]
  end
  table.sort(sorted)
  local remaining = budget
  local left = n
  local filled = 0
  local level = remaining / left
  for i = 1, n do
    level = remaining / left
    if sorted[i] > level then
      break
    end
    remaining = remaining - sorted[i]
    left = left - 1
    filled = i
  end
  if filled == n then
    return need[mine_at]
  end
  local mine = need[mine_at]
  if filled == 0 then
    return level
  end
  local last = sorted[filled]
  if mine < last then
    return mine
  end
  if mine > last then
    return level
  end
  -- how many brokers of need `last` were filled, and whether this one is among them (ties in id order)
  local ties = 0
  for i = filled, 1, -1 do
    if sorted[i] ~= last then
      break
    end
    ties = ties + 1
  end
  local before = 0
  for i = 1, mine_at - 1 do
    if need[i] == last then
      before = before + 1
    end
  end
  if before < ties then
    return mine
  end
  return level
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
    local state = load(key)
    local ids0, d0, x0, t0, s0 = state[1], state[2], state[3], state[4], state[5]
    -- this broker's report in its place, and the brokers whose lease ran out dropped (their shares return)
    local ids, d, x, t, s = {}, {}, {}, {}, {}
    local n = 0
    local placed = false
    local mine_at
    for j = 1, #ids0 + 1 do
      local b = ids0[j]
      if not placed and (b == nil or b >= me) then
        n = n + 1
        ids[n], d[n], x[n], t[n], s[n] = me, tonumber(ARGV[a + 2]), ARGV[a + 3] == '1', now, false
        mine_at = n
        placed = true
        if b == me then
          s[n] = s0[j]
          b = nil
        end
      end
      if b ~= nil and now - t0[j] <= lease then
        n = n + 1
        ids[n], d[n], x[n], t[n], s[n] = b, d0[j], x0[j], t0[j], s0[j]
      end
    end
    local floor = budget * floor_fraction / n
    local need = {}
    local total = 0.0
    for j = 1, n do
      if x[j] then
        need[j] = math.huge
      else
        need[j] = math.max(floor, d[j] * (1 + headroom))
      end
      total = total + need[j]
    end
    local target = target_of(budget, ids, need, total, mine_at)
    local others = 0.0
    for j = 1, n do
      if j ~= mine_at and s[j] then
        others = others + s[j]
      end
    end
    -- budgets.next_share: down at once, up only from what the others released, never below what it holds
    local mine = s[mine_at] or budget / n
    local share
    if target <= mine then
      share = math.max(floor, target)
    else
      share = math.max(floor, mine, math.min(target, budget - others))
    end
    s[mine_at] = share
    redis.call('SET', key, cmsgpack.pack({ids, d, x, t, s}), 'PX', lease * 3)
    shares[#shares + 1] = string.format('%.17g', share)
  end
end

return {now, version, scope, shares}
