-- One broker's round of cluster-wide budgets: record what moved, hand out its shares.
-- The same arithmetic as engine/budgets.py (the reference model); the protocol is
-- docs/internals/cluster-budgets-protocol.md.
--
-- KEYS[1] qb:{C}:scope  (scope field -> 'cluster', and '#version')
-- KEYS[2] qb:{C}:brokers (broker id -> ms of its last round: the lease of every budget entry it holds)
-- KEYS[3..] qb:{C}:b:<budget id>, one per budget in the report: a hash of
--   st   cmsgpack {broker ids ascending, demands, saturated (booleans), false, B, params, 3} (3: this layout)
--   sh   cmsgpack {held shares in the ids' order (false: none yet)}: apart, so that a share computed again writes
--        only them
--   v    the budget's version: one more whenever what its targets depend on changes (B, the params, a demand,
--        a saturation, a broker joining or leaving)
--   lo   a time no broker's last round is older than (so leases are read only when one may have run out)
--   k:<broker>  '<v> <its last report's four values> <share>' while its share is settled at its target
--   w    cmsgpack {v, params, B, the water-fill of that version (fill_of), the broker ids}: computed once per version
--   r:<broker>  its last report as it sent it, '<B> <demand> <saturated>' (the entry's report, computed again when
--        other brokers' reports move its share)
-- Beside them (same hash tag, so the same slot): qb:{C}:seq a counter, one more each round; qb:{C}:moved a sorted
-- set of budget ids scored by the round (seq) that last moved an input of their brokers' shares, so a broker's round
-- computes again each budget it holds that moved after its last round (qb:{C}:seen, broker -> the seq of its last
-- round); qb:{C}:h:<broker> the budget ids it holds an entry in; qb:{C}:sweep the budget ids of brokers whose lease
-- ran out, not yet swept.
-- ARGV[1] broker id, ARGV[2] lease ms, ARGV[3] floor fraction, ARGV[4] headroom,
-- ARGV[5] now ms ('' = Redis's clock), ARGV[6] the scope version the broker holds ('' = none),
-- ARGV[7] '1' when the report carries every budget the broker holds (its first round, or after a resync: one it held
-- and left out is left), else '0',
-- then per budget in the report: scope field, budget, demand, saturated (1/0; '-' = the broker drops the budget).
-- Returns {now_ms, scope version, scope fields (empty when the broker's version is current), shares (one per
-- budget in the report), moved (budget id, share, ... of budgets not in the report whose share was computed
-- again), resync (1 when this broker's lease had run out or it never reported, and this report was not whole: its
-- next report must be)}.

local broker = ARGV[1]
local lease = tonumber(ARGV[2])
local floor_fraction = tonumber(ARGV[3])
local headroom = tonumber(ARGV[4])
local whole = ARGV[7] == '1'
local FIRST = 8  -- the first budget's ARGV
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
end
local prefix = string.sub(KEYS[2], 1, #KEYS[2] - #'brokers')
local SWEEP = 500  -- budgets swept per round: bounds how long one round holds Redis after a broker dies

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
local seq = redis.call('INCR', prefix .. 'seq')
local MOVED = prefix .. 'moved'
local previous = redis.call('HGET', KEYS[2], broker)
local seen = redis.call('HGET', prefix .. 'seen', broker)
redis.call('HSET', prefix .. 'seen', broker, seq)
-- a broker whose lease ran out may have lost entries to a sweep, and one Redis never saw (or lost) has none
local resync = (not whole and (not previous or not seen or now - tonumber(previous) > lease)) and 1 or 0
redis.call('HSET', KEYS[2], broker, now)

-- The water-fill of a demand vector (budgets.targets), what every broker's target follows from: the needs' total,
-- and when that is over the budget the brokers filled with their need, the level the others get, the last need
-- filled and how many brokers filled have it. Needs are summed in ascending broker id and water-filled in ascending
-- need as the model does, so the doubles are the model's: the needs are sorted as plain numbers (ties subtract the
-- same value), and ties at the last need filled are broken by broker id, as the model's sort by (need, id) does.
local function fill_of(budget, need, total)
  local n = #need
  if total <= budget then
    return {total}
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
  if filled == n or filled == 0 then
    return {total, filled, level}
  end
  local last = sorted[filled]
  local ties = 0
  for i = filled, 1, -1 do
    if sorted[i] ~= last then
      break
    end
    ties = ties + 1
  end
  return {total, filled, level, last, ties}
end

-- One broker's target from the water-fill: its need, or the level.
local function target_of(f, budget, n, need, mine_at)
  local total, filled, level, last, ties = f[1], f[2], f[3], f[4], f[5]
  if total <= budget then
    return need[mine_at] + (budget - total) / n
  end
  if filled == n then
    return need[mine_at]
  end
  local mine = need[mine_at]
  if filled == 0 then
    return level
  end
  if mine < last then
    return mine
  end
  if mine > last then
    return level
  end
  -- whether this broker is among the brokers of need `last` that were filled (ties in id order)
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

-- budgets.next_share: a broker's share moves down at once, and up only from what the others released, never below
-- what it holds; the new share is written into s.
local function next_share(s, n, mine_at, target, floor, budget)
  local others = 0.0
  for j = 1, n do
    if j ~= mine_at and s[j] then
      others = others + s[j]
    end
  end
  local held = s[mine_at]
  local mine = held or budget / n
  local share
  if target <= mine then
    share = math.max(floor, target)
  else
    share = math.max(floor, mine, math.min(target, budget - others))
  end
  s[mine_at] = share
  return share, held
end

local me = tonumber(broker)
local params = ARGV[3] .. ' ' .. ARGV[4]

-- The columns of a state with one entry per broker.
local COLUMNS = {1, 2, 3, 4}

-- A budget's state, its held shares in st[4], or nil for none or a hash of a layout before (four fields per
-- broker, or a packed state without this layout's mark): those are deleted, their brokers start afresh.
local function state_of(key)
  local raw = redis.call('HMGET', key, 'st', 'sh')
  if raw[1] and raw[2] then
    local st = cmsgpack.unpack(raw[1])
    if st[7] == 3 then
      st[4] = cmsgpack.unpack(raw[2])
      return st
    end
  end
  redis.call('DEL', key)
  return nil
end

-- A state as stored: the fields st and sh.
local function packed(st)
  local s = st[4]
  st[4] = false
  local raw = cmsgpack.pack(st)
  st[4] = s
  return raw, cmsgpack.pack(s)
end

-- The brokers of a budget whose share may have moved compute it again at their next round.
local function tell(id)
  redis.call('ZADD', MOVED, seq, id)
end

-- The entries of brokers whose lease ran out (their last round older than the lease) dropped from a state's
-- columns, in place; returns whether any was, and the oldest last round left (nil when none is).
local function expire(st, key)
  local ids0 = st[1]
  if #ids0 == 0 then
    return false, nil
  end
  local names = {}
  for j = 1, #ids0 do
    names[j] = tostring(ids0[j])
  end
  local rounds = redis.call('HMGET', KEYS[2], unpack(names))
  local cols = {{}, {}, {}, {}}
  local oldest
  local dropped = false
  for j = 1, #ids0 do
    local last = tonumber(rounds[j] or 0)
    if ids0[j] ~= me and now - last > lease then
      redis.call('HDEL', key, 'k:' .. ids0[j], 'r:' .. ids0[j])  -- its lease ran out: its share returns
      dropped = true
    else
      local n = #cols[1] + 1
      for _, c in ipairs(COLUMNS) do
        cols[c][n] = st[c][j]
      end
      if ids0[j] ~= me and (not oldest or last < oldest) then
        oldest = last
      end
    end
  end
  for _, c in ipairs(COLUMNS) do
    st[c] = cols[c]
  end
  return dropped, oldest
end

local function save(key, st, v, lo)
  if #st[1] == 0 then
    redis.call('DEL', key)
    redis.call('ZREM', MOVED, string.sub(key, #prefix + 3))
  else
    local raw, sh = packed(st)
    redis.call('HSET', key, 'st', raw, 'sh', sh, 'v', v, 'lo', lo)
  end
end

-- One budget, the long way: its whole state read, this broker's report put in its place, the brokers whose lease
-- ran out dropped (their shares return), this broker's target and share computed over all of them.
local function allocate(id, key, budget_text, demand_text, saturated_text, sig, v, lo, w, st)
  local budget = tonumber(budget_text)
  st = st or state_of(key)
  local changed
  if st then
    changed = st[5] ~= budget_text or st[6] ~= params
  else
    st, changed, v, lo = {{}, {}, {}, {}, budget_text, params, 3}, true, nil, nil
  end
  -- every broker's last round is at least lo: only when that is older than the lease are they read
  if lo and now - tonumber(lo) > lease then
    local dropped, oldest = expire(st, key)
    changed = changed or dropped
    lo = oldest or now
  end
  local ids, d, x, s = st[1], st[2], st[3], st[4]
  local demand, saturated = tonumber(demand_text), saturated_text == '1'
  local mine_at
  for j = 1, #ids do
    if ids[j] == me then
      mine_at = j
      break
    end
  end
  if mine_at then
    changed = changed or d[mine_at] ~= demand or x[mine_at] ~= saturated
    d[mine_at], x[mine_at] = demand, saturated
  else
    -- this broker joins the budget: its entry goes in its place in ascending broker id
    mine_at = #ids + 1
    for j = 1, #ids do
      if ids[j] > me then
        mine_at = j
        break
      end
    end
    table.insert(ids, mine_at, me)
    table.insert(d, mine_at, demand)
    table.insert(x, mine_at, saturated)
    table.insert(s, mine_at, false)
    changed = true
    redis.call('SADD', prefix .. 'h:' .. broker, id)
  end
  local n = #ids
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
  if changed then
    v = tostring((tonumber(v) or 0) + 1)  -- every settled share must be computed again: the others are told
  end
  -- the water-fill depends on the version, the params and B alone: computed once for all the brokers of a version
  local f
  if w then
    local cached = cmsgpack.unpack(w)
    if cached[1] == v and cached[2] == params and cached[3] == budget_text then
      f = cached[4]
    end
  end
  local fresh = not f
  if fresh then
    f = fill_of(budget, need, total)
  end
  local target = target_of(f, budget, n, need, mine_at)
  local share, held = next_share(s, n, mine_at, target, floor, budget)
  local report = budget_text .. ' ' .. demand_text .. ' ' .. saturated_text
  st[5], st[6] = budget_text, params
  local text = string.format('%.17g', share)
  if changed then
    tell(id)
  elseif held and share < held then
    -- it released some: a broker below its target may grow into it (one at its target answers the short way)
    tell(id)
  end
  if not lo or now < tonumber(lo) then
    lo = now
  end
  local raw, sh = packed(st)
  local fields = {'st', raw, 'sh', sh, 'v', v, 'lo', lo, 'r:' .. broker, report}
  if fresh then
    fields[#fields + 1] = 'w'
    fields[#fields + 1] = cmsgpack.pack({v, params, budget_text, f, ids})
  end
  if target <= share then
    -- settled: until the budget's inputs change (v), the same report gives the same share (budgets.next_share
    -- keeps max(floor, target) once the share reaches its target), so it is answered from this field
    fields[#fields + 1] = 'k:' .. broker
    fields[#fields + 1] = v .. ' ' .. sig .. text
    redis.call('HSET', key, unpack(fields))
  else
    redis.call('HSET', key, unpack(fields))
    redis.call('HDEL', key, 'k:' .. broker)
  end
  return text
end

-- A share computed again for this broker while the budget's water-fill of its version is kept (w) and no lease can
-- have run out: nothing it depends on moved but the shares the others hold, so its report, the fill and the shares
-- are all it takes, and only the shares are written again. nil when its need ties at the fill's edge (the needs of
-- the brokers before it decide: the long way).
local function again(id, key, sig, b, dm, x, lo, cached, sh)
  local v, f, ids = cached[1], cached[4], cached[5]
  local n = #ids
  local mine_at
  for j = 1, n do
    if ids[j] == me then
      mine_at = j
      break
    end
  end
  local budget = tonumber(b)
  local floor = budget * floor_fraction / n
  local need = {}
  if x == '1' then
    need[mine_at] = math.huge
  else
    need[mine_at] = math.max(floor, tonumber(dm) * (1 + headroom))
  end
  if f[1] > budget and f[2] ~= n and f[2] ~= 0 and need[mine_at] == f[4] then
    return nil
  end
  local target = target_of(f, budget, n, need, mine_at)
  local s = cmsgpack.unpack(sh)
  local share, held = next_share(s, n, mine_at, target, floor, budget)
  local text = string.format('%.17g', share)
  if held and share < held then
    tell(id)  -- it released some
  end
  if target <= share then
    redis.call('HSET', key, 'sh', cmsgpack.pack(s), 'k:' .. broker, v .. ' ' .. sig .. text)
  else
    redis.call('HSET', key, 'sh', cmsgpack.pack(s))
    redis.call('HDEL', key, 'k:' .. broker)
  end
  if now < tonumber(lo) then
    redis.call('HSET', key, 'lo', now)  -- a clock that went back: lo stays a bound of every last round
  end
  return text
end

-- One budget of this broker: the short way when the same report as last time finds nothing else changed in the
-- budget and no lease can have run out, else the long way.
local function share_of(id, key, budget_text, demand_text, saturated_text, st)
  local sig = params .. ' ' .. budget_text .. ' ' .. demand_text .. ' ' .. saturated_text .. ' '
  local head = redis.call('HMGET', key, 'v', 'lo', 'k:' .. broker, 'w')
  local v, lo, k = head[1], head[2], head[3]
  if k and now - tonumber(lo) <= lease and string.sub(k, 1, #v + 1 + #sig) == v .. ' ' .. sig then
    if now < tonumber(lo) then
      redis.call('HSET', key, 'lo', now)  -- a clock that went back: lo stays a bound of every last round
    end
    return string.sub(k, #v + #sig + 2)
  end
  return allocate(id, key, budget_text, demand_text, saturated_text, sig, v, lo, head[4], st)
end

-- The broker leaves a budget (its sensor is gone, or the value is no longer cluster-wide): its share returns.
local function leave(id, key)
  redis.call('SREM', prefix .. 'h:' .. broker, id)
  local st = state_of(key)
  if not st then
    return
  end
  for j = 1, #st[1] do
    if st[1][j] == me then
      for _, c in ipairs(COLUMNS) do
        table.remove(st[c], j)
      end
      local v = tostring((tonumber(redis.call('HGET', key, 'v')) or 0) + 1)
      redis.call('HDEL', key, 'k:' .. broker, 'r:' .. broker)
      tell(id)
      save(key, st, v, redis.call('HGET', key, 'lo') or now)
      return
    end
  end
end

-- Brokers whose lease ran out: every budget they held is swept (their entries dropped, the others told), a
-- bounded number per round.
local rounds = redis.call('HGETALL', KEYS[2])
for j = 1, #rounds, 2 do
  local b = rounds[j]
  if b ~= broker and now - tonumber(rounds[j + 1]) > lease then
    local h = prefix .. 'h:' .. b
    if redis.call('EXISTS', h) == 1 then
      redis.call('SUNIONSTORE', prefix .. 'sweep', prefix .. 'sweep', h)
      redis.call('DEL', h)
    end
  end
end
local swept = redis.call('SPOP', prefix .. 'sweep', SWEEP)
for _, id in ipairs(swept) do
  local key = prefix .. 'b:' .. id
  local st = state_of(key)
  if st then
    local dropped, oldest = expire(st, key)
    if dropped then
      local v = tostring((tonumber(redis.call('HGET', key, 'v')) or 0) + 1)
      tell(id)
      save(key, st, v, oldest or now)
    end
  end
end

-- whether each reported scope field is cluster-wide, in a few calls rather than one per budget (unpack takes at
-- most a few thousand values at once)
local wide = {}
local fields = {}
local held_ids = {}
for i = 3, #KEYS do
  fields[#fields + 1] = ARGV[FIRST + (i - 3) * 4]
  if #fields == 4000 or i == #KEYS then
    local got = redis.call('HMGET', KEYS[1], unpack(fields))
    for j = 1, #fields do
      wide[#wide + 1] = got[j] ~= false
    end
    fields = {}
  end
end

local shares = {}
local reported = {}
local skip = #prefix + 3  -- 'b:'
for i = 3, #KEYS do
  reported[string.sub(KEYS[i], skip)] = true
end
if whole then
  -- a whole report carries every budget the broker holds: one it held and left out (a restarted broker whose
  -- sensor is gone does not know it held it) is left, or its entry would live on with the broker's rounds
  for _, id in ipairs(redis.call('SMEMBERS', prefix .. 'h:' .. broker)) do
    if not reported[id] then
      leave(id, prefix .. 'b:' .. id)
    end
  end
end
for i = 3, #KEYS do
  local a = FIRST + (i - 3) * 4
  local key = KEYS[i]
  local id = string.sub(key, skip)
  if ARGV[a + 3] == '-' then
    leave(id, key)
    shares[#shares + 1] = ''
  elseif not wide[i - 2] then
    redis.call('DEL', key)  -- not cluster-wide (any more): the broker enforces the value per broker
    shares[#shares + 1] = ''
  else
    shares[#shares + 1] = share_of(id, key, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
    if whole then
      held_ids[#held_ids + 1] = id
    end
  end
  if #held_ids == 4000 or (i == #KEYS and #held_ids > 0) then
    -- a whole report: every budget in it is one this broker holds (a sweep may have dropped it from the set)
    redis.call('SADD', prefix .. 'h:' .. broker, unpack(held_ids))
    held_ids = {}
  end
end

-- The budgets other rounds moved since this broker's last round that it holds and did not report: its last report
-- of each, again. A whole report needs none (every budget it holds was in it).
local moved = {}
local ids = {}
if seen and not whole then
  local since = redis.call('ZRANGEBYSCORE', MOVED, '(' .. seen, '+inf')
  for j = 1, #since, 4000 do
    local part = {unpack(since, j, math.min(j + 3999, #since))}
    local member = redis.call('SMISMEMBER', prefix .. 'h:' .. broker, unpack(part))
    for m = 1, #part do
      if member[m] == 1 then
        ids[#ids + 1] = part[m]
      end
    end
  end
end
for _, id in ipairs(ids) do
  if not reported[id] then
    local key = prefix .. 'b:' .. id
    local head = redis.call('HMGET', key, 'v', 'lo', 'k:' .. broker, 'r:' .. broker, 'w', 'sh')
    local v, lo, k, r = head[1], head[2], head[3], head[4]
    -- settled at the budget's current version: its share is the one it holds (it moved only below the others'
    -- targets, or for a broker below its target), nothing to answer; no report of it: it holds no entry
    local settled = k and now - tonumber(lo) <= lease and string.sub(k, 1, #v + #params + 2) == v .. ' ' .. params .. ' '
    if v and r and not settled then
      local b, dm, x = string.match(r, '^(%S+) (%S+) (%S+)$')
      local sig = params .. ' ' .. b .. ' ' .. dm .. ' ' .. x .. ' '
      local text
      if head[5] and head[6] and now - tonumber(lo) <= lease then
        local cached = cmsgpack.unpack(head[5])
        if cached[1] == v and cached[2] == params and cached[3] == b then
          text = again(id, key, sig, b, dm, x, lo, cached, head[6])
        end
      end
      if not text then
        local st = state_of(key)
        text = st and allocate(id, key, b, dm, x, sig, v, lo, head[5], st)
      end
      if text then
        moved[#moved + 1] = id
        moved[#moved + 1] = text
      end
    end
  end
end

return {now, version, scope, shares, moved, resync}
