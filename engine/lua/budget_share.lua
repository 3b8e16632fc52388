-- One broker's round of cluster-wide budgets: record its demand, hand out its shares.
-- The same arithmetic as engine/budgets.py (the reference model); the protocol is
-- docs/internals/cluster-budgets-protocol.md.
--
-- KEYS[1] qb:{C}:scope  (scope field -> 'cluster', and '#version')
-- KEYS[2] qb:{C}:brokers (broker id -> ms of its last round)
-- KEYS[3..] qb:{C}:b:<budget id>, one per reported budget: a hash of
--   st   cmsgpack {broker ids ascending, demands, saturated (booleans), held shares (false: none yet), B, params}
--   v    the budget's version: one more whenever what its targets depend on changes (B, the params, a demand,
--        a saturation, a broker joining or leaving)
--   lo   a time no broker's last report is older than (so leases are read only when one may have run out)
--   t:<broker>  its last report (ms)
--   k:<broker>  '<v> <its last report's four values> <share>' while its share is settled at its target
--   e    when (Redis's clock, ms) the hash expires: 4 leases after a report, renewed once less than 3 are left
-- ARGV[1] broker id, ARGV[2] lease ms, ARGV[3] floor fraction, ARGV[4] headroom,
-- ARGV[5] now ms ('' = Redis's clock), ARGV[6] the scope version the broker holds ('' = none),
-- then per budget: scope field, budget, demand, saturated (1/0).
-- Returns {now_ms, scope version, scope fields (empty when the broker's version is current), shares}.

local broker = ARGV[1]
local lease = tonumber(ARGV[2])
local floor_fraction = tonumber(ARGV[3])
local headroom = tonumber(ARGV[4])
local t = redis.call('TIME')
-- Redis's own clock (ms) times the keys' expiry, whatever clock ARGV[5] gives the leases
local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now = clock
if ARGV[5] ~= '' then
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
local params = ARGV[3] .. ' ' .. ARGV[4]

-- One budget, the long way: its whole state read, this broker's report put in its place, the brokers whose lease
-- ran out dropped (their shares return), this broker's target and share computed over all of them.
local function allocate(key, budget_text, demand_text, saturated_text, sig, v, lo)
  local budget = tonumber(budget_text)
  local raw = redis.call('HGET', key, 'st')
  local ids0, d0, x0, s0, changed
  if raw then
    local st = cmsgpack.unpack(raw)
    ids0, d0, x0, s0 = st[1], st[2], st[3], st[4]
    changed = st[5] ~= budget_text or st[6] ~= params
  else
    redis.call('DEL', key)  -- none, or a hash of the layout before (four fields per broker): start afresh
    ids0, d0, x0, s0, changed, v, lo = {}, {}, {}, {}, true, nil, nil
  end
  -- every broker's last report is at least lo: only when that is older than the lease are they read
  local t0
  local expiring = lo and now - tonumber(lo) > lease
  if expiring then
    local names = {}
    for j = 1, #ids0 do
      names[j] = 't:' .. ids0[j]
    end
    t0 = #names > 0 and redis.call('HMGET', key, unpack(names)) or {}
    lo = now
  end
  local ids, d, x, s = {}, {}, {}, {}
  local n = 0
  local mine_at
  local demand, saturated = tonumber(demand_text), saturated_text == '1'
  if not expiring then
    for j = 1, #ids0 do
      if ids0[j] == me then
        mine_at = j
        break
      end
    end
  end
  if mine_at then
    -- the common case, no broker joins or leaves: the columns as they are, this broker's entry replaced
    ids, d, x, s, n = ids0, d0, x0, s0, #ids0
    changed = changed or d[mine_at] ~= demand or x[mine_at] ~= saturated
    d[mine_at], x[mine_at] = demand, saturated
  else
    for j = 1, #ids0 + 1 do
      local b = ids0[j]
      if not mine_at and (b == nil or b >= me) then
        n = n + 1
        ids[n], d[n], x[n], s[n] = me, demand, saturated, false
        mine_at = n
        if b == me then
          s[n] = s0[j]
          changed = changed or d0[j] ~= demand or x0[j] ~= saturated
          b = nil
        else
          changed = true  -- a broker joins
        end
      end
      if b ~= nil then
        local t = expiring and tonumber(t0[j] or 0)
        if expiring and now - t > lease then
          redis.call('HDEL', key, 't:' .. b, 'k:' .. b)  -- its lease ran out: its share returns to the pool
          changed = true
        else
          if expiring and t < lo then
            lo = t
          end
          n = n + 1
          ids[n], d[n], x[n], s[n] = b, d0[j], x0[j], s0[j]
        end
      end
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
  local text = string.format('%.17g', share)
  if changed then
    v = tostring((tonumber(v) or 0) + 1)  -- every settled share must be computed again
  end
  if not lo or now < tonumber(lo) then
    lo = now
  end
  redis.call('HSET', key, 'st', cmsgpack.pack({ids, d, x, s, budget_text, params}), 'v', v, 'lo', lo,
    't:' .. broker, now, 'e', clock + lease * 4)
  redis.call('PEXPIRE', key, lease * 4)
  if target <= share then
    -- settled: until the budget's inputs change (v), the same report gives the same share (budgets.next_share
    -- keeps max(floor, target) once the share reaches its target), so it is answered from this field
    redis.call('HSET', key, 'k:' .. broker, v .. ' ' .. sig .. text)
  else
    redis.call('HDEL', key, 'k:' .. broker)
  end
  return text
end

-- whether each reported scope field is cluster-wide, in a few calls rather than one per budget (unpack takes at
-- most a few thousand values at once)
local wide = {}
local fields = {}
for i = 3, #KEYS do
  fields[#fields + 1] = ARGV[7 + (i - 3) * 4]
  if #fields == 4000 or i == #KEYS then
    local got = redis.call('HMGET', KEYS[1], unpack(fields))
    for j = 1, #fields do
      wide[#wide + 1] = got[j] ~= false
    end
    fields = {}
  end
end

local shares = {}
for i = 3, #KEYS do
  local a = 7 + (i - 3) * 4
  local key = KEYS[i]
  if not wide[i - 2] then
    redis.call('DEL', key)  -- not cluster-wide (any more): the broker enforces the value per broker
    shares[#shares + 1] = ''
  else
    -- the short way: the same report as last time, nothing else in the budget changed, no lease can have run out
    local sig = params .. ' ' .. ARGV[a + 1] .. ' ' .. ARGV[a + 2] .. ' ' .. ARGV[a + 3] .. ' '
    local head = redis.call('HMGET', key, 'v', 'lo', 'k:' .. broker, 'e')
    local v, lo, k = head[1], head[2], head[3]
    local text
    if k and now - tonumber(lo) <= lease and string.sub(k, 1, #v + 1 + #sig) == v .. ' ' .. sig then
      text = string.sub(k, #v + #sig + 2)
      if tonumber(head[4] or 0) - clock >= lease * 3 then
        redis.call('HSET', key, 't:' .. broker, now)
      else
        -- the hash outlives every report by at least 3 leases (no report finds it gone that would have before)
        redis.call('HSET', key, 't:' .. broker, now, 'e', clock + lease * 4)
        redis.call('PEXPIRE', key, lease * 4)
      end
      if now < tonumber(lo) then
        redis.call('HSET', key, 'lo', now)  -- a clock that went back: lo stays a bound of every last report
      end
    else
      text = allocate(key, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], sig, v, lo)
    end
    shares[#shares + 1] = text
  end
end

return {now, version, scope, shares}
