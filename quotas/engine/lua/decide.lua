-- Kafka quota decisions on a batch of sensors: one atomic call, many decisions.
--
-- KEYS[i]  a sensor key (all keys of one sensor share one hash tag; KEYS[i]..':t'
--          holds its throttle-time statistics)
-- ARGV[1]  packed decisions, each '<BBHHidddd':
--          op*16+kind, flags, key index, samples, window_ms, t, value, bound, aux
-- ARGV[2]  sensor expiry in ms (Kafka: one hour without a record)
-- returns  packed outcomes, each '<Biddd':
--          bits (1 violated, 2 recorded, 4 upper, 8 lower), window_ms, value, sum, throttle_raw
--          then, when any decision asked for the server clock, '<d' of that clock
--
-- The arithmetic follows Java's order of operations on doubles, so results equal
-- Kafka's bit for bit (Lua numbers are IEEE doubles; times are exact integers).
-- Stored layouts (little endian):
--   sampled rate  '<ldBBi' base ms, last bound, current slot, slot count, TTL-refresh offset,
--                 then per slot '<iid' start and last-event offsets from base, value
--   token bucket  '<dldl'  tokens, last update ms, last bound, TTL-refresh ms
--   cumulative    '<d'     total
-- A sensor's TTL is set to expiry + expiry/60 when it is created or when a record comes
-- expiry/60 after the last refresh, so it expires between 1 and 1 + 1/60 expiry after its
-- last record without paying for a PEXPIRE on every decision.

local OP_RECORD, OP_NOCHECK, OP_STRICT, OP_CHECK, OP_MEASURE = 1, 2, 3, 4, 5
local K_SUM, K_COUNT, K_SAMPLES, K_TB, K_CUM = 0, 1, 2, 3, 4
local F_BOUND, F_AUX, F_SERVER_TIME, F_TRACK, F_NO_EXPIRY, F_RAW = 1, 2, 4, 8, 16, 32
local LONG_MAX_D = 9223372036854775807
local REBASE = 1073741824
local INT_MIN, INT_MAX = -2147483648, 2147483647

local spack, sunpack, srep = struct.pack, struct.unpack, string.rep
local floor, ceil = math.floor, math.ceil
local band = bit.band
local rcall = redis.call

local SAMPLED_FMT = {}
local function sampled_fmt(n)
  local f = SAMPLED_FMT[n]
  if not f then
    f = '<ldBBi' .. srep('iid', n)
    SAMPLED_FMT[n] = f
  end
  return f
end

-- Java Math.min(double, double): NaN wins, -0.0 < 0.0
local function jmin(a, b)
  if a ~= a then return a end
  if b ~= b then return b end
  if a == 0 and b == 0 then
    if 1 / a < 0 then return a end
    return b
  end
  if a <= b then return a end
  return b
end

-- SampledStat in place on the unpacked record v (times are offsets from v[1]) -------

local function s_new_first(v, tt)
  v[3] = 0; v[4] = 1; v[6] = tt; v[7] = tt; v[8] = 0.0
end

local function s_record(v, kind, samples, window, val, tt)
  local j
  if v[4] == 0 then
    s_new_first(v, tt); j = 6
  else
    j = 6 + v[3] * 3
    if tt - v[j] >= window then
      local cur = (v[3] + 1) % (samples + 1)
      v[3] = cur
      if cur >= v[4] then v[4] = cur + 1 end
      j = 6 + cur * 3
      v[j] = tt; v[j + 1] = tt; v[j + 2] = 0.0
    end
  end
  if kind == K_SUM then
    v[j + 2] = v[j + 2] + val
  elseif kind == K_COUNT then
    v[j + 2] = v[j + 2] + 1.0
  else
    v[j + 2] = 1.0
  end
  v[j + 1] = tt
end

-- purge, then the windowed total in slot order (as Kafka sums it) and the oldest start
local function s_purge_sum(v, samples, window, tt)
  local age = samples * window
  local sum, oldest = 0.0, nil
  local j = 6
  for _ = 1, v[4] do
    if tt - v[j + 1] >= age then v[j] = tt; v[j + 1] = tt; v[j + 2] = 0.0 end
    sum = sum + v[j + 2]
    local st = v[j]
    if oldest == nil or st < oldest then oldest = st end
    j = j + 3
  end
  return sum, oldest
end

-- Rate.measure: returns rate, window size (ms), windowed sum
local function s_measure(v, samples, window, tt)
  local sum, oldest = s_purge_sum(v, samples, window, tt)
  if oldest == nil then s_new_first(v, tt); oldest = tt end
  local elapsed = tt - oldest
  local full = elapsed / window
  if full >= 0 then full = floor(full) else full = ceil(full) end
  if full < samples - 1 then elapsed = elapsed + (samples - 1 - full) * window end
  if elapsed < 1 then elapsed = 1 end
  return sum / (elapsed / 1000.0), elapsed, sum
end

local function clamp(x)
  if x < INT_MIN then return INT_MIN end
  if x > INT_MAX then return INT_MAX end
  return x
end

-- keep offsets within int32: move the base to t when t has drifted 2^30 ms from it
local function s_rebase(v, t)
  local delta = t - v[1]
  v[1] = t
  v[5] = clamp(v[5] - delta)
  local j = 6
  for _ = 1, v[4] do
    v[j] = clamp(v[j] - delta); v[j + 1] = clamp(v[j + 1] - delta)
    j = j + 3
  end
end

-- Throttle-time statistics for live charts -------------------------------

local function track_throttle(key, raw, max_ms, t, window, px)
  if raw ~= raw or raw <= 0 then return end
  local ms = floor(raw + 0.5)
  if max_ms > 0 and ms > max_ms then ms = max_ms end
  local tkey = key .. ':t'
  local cur = rcall('GET', tkey)
  local ws, c, tot, mx, pc, pt, pm, all = 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
  if cur then ws, c, tot, mx, pc, pt, pm, all = sunpack('<lddddddd', cur) end
  if t - ws >= window then
    if t - ws < 2 * window then pc, pt, pm = c, tot, mx else pc, pt, pm = 0.0, 0.0, 0.0 end
    ws, c, tot, mx = t, 0.0, 0.0, 0.0
  end
  c = c + 1; tot = tot + ms
  if ms > mx then mx = ms end
  all = all + ms
  rcall('SET', tkey, spack('<lddddddd', ws, c, tot, mx, pc, pt, pm, all), 'PX', px)
end

-- The batch --------------------------------------------------------------

local buf = ARGV[1]
local expiry = tonumber(ARGV[2])
local refresh = floor(expiry / 60)
local px = expiry + refresh
local pos, len = 1, #buf
local states, kinds, fresh, recorded, persistent, last_t = {}, {}, {}, {}, {}, {}
local out, nout = {}, 0
local server_now = nil

while pos <= len do
  local opkind, flags, ki, samples, window, t, val, bound, aux
  opkind, flags, ki, samples, window, t, val, bound, aux, pos = sunpack('<BBHHidddd', buf, pos)
  local op, kind = floor(opkind / 16), opkind % 16
  if band(flags, F_SERVER_TIME) ~= 0 then
    if not server_now then
      local tm = rcall('TIME')
      server_now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
    end
    t = server_now
  end
  local key = KEYS[ki]
  local s = states[ki]
  if not s or kinds[ki] ~= kind then
    local raw = rcall('GET', key)
    if kind == K_TB then
      if raw then s = { sunpack('<dldl', raw) } else s = { 0.0, 0, 0.0, 0 }; fresh[ki] = true end
    elseif kind == K_CUM then
      if raw then s = { (sunpack('<d', raw)) } else s = { 0.0 }; fresh[ki] = true end
    else
      if raw then
        s = { sunpack(sampled_fmt((#raw - 22) / 16), raw) }
      else
        s = { t, 0.0, 0, 0, 0 }; fresh[ki] = true
      end
    end
    states[ki] = s; kinds[ki] = kind
  end
  local with_bound = band(flags, F_BOUND) ~= 0
  if band(flags, F_NO_EXPIRY) ~= 0 then persistent[ki] = true end
  last_t[ki] = t
  local bits, value, ws, sum, throttle = 0, 0.0, 0, 0.0, 0.0

  if kind == K_TB then
    -- s = { tokens, last update ms, bound, TTL refresh ms }
    local burst = 0.0
    if with_bound then
      s[3] = bound
      burst = (samples * (window / 1000.0)) * bound
    end
    local violated = false
    if with_bound and (op == OP_STRICT or op == OP_CHECK) then
      s[1] = jmin(burst, s[1] + bound * ((t - s[2]) / 1000.0)); s[2] = t
      if s[1] < 0 then violated = true; throttle = -s[1] / bound * 1000 end
    end
    if op == OP_RECORD or op == OP_NOCHECK or (op == OP_STRICT and not violated) then
      if with_bound then
        s[1] = jmin(burst, s[1] + bound * ((t - s[2]) / 1000.0)); s[2] = t
        s[1] = jmin(burst, s[1] - val)
        if op == OP_RECORD then
          s[1] = jmin(burst, s[1] + bound * ((t - s[2]) / 1000.0))
          if s[1] < 0 then violated = true; throttle = -s[1] / bound * 1000 end
        end
      end
      bits = 2; recorded[ki] = true
    end
    if violated then bits = bits + 1 end
    if op ~= OP_NOCHECK then
      if with_bound then
        s[1] = jmin(burst, s[1] + bound * ((t - s[2]) / 1000.0)); s[2] = t
        value = s[1]
      else
        value = LONG_MAX_D
      end
    end
    if violated and band(flags, F_TRACK) ~= 0 then track_throttle(key, throttle, 0, t, window, px) end

  elseif kind == K_CUM then
    if op == OP_RECORD or op == OP_NOCHECK then
      s[1] = s[1] + val; bits = 2; recorded[ki] = true
    end
    if op == OP_RECORD or op == OP_CHECK then
      if with_bound and not (s[1] <= bound) then
        bits = bits + 1 + 4
      elseif band(flags, F_AUX) ~= 0 and not (s[1] >= aux) then
        bits = bits + 1 + 8
      end
    end
    value = s[1]

  else
    -- s = { base, bound, current slot, slot count, TTL refresh offset, slots... }
    local tt = t - s[1]
    if tt > REBASE or tt < -REBASE then s_rebase(s, t); tt = 0 end
    if with_bound then s[2] = bound end
    local violated = false
    if with_bound and (op == OP_STRICT or op == OP_CHECK) then
      local rate
      rate, ws = s_measure(s, samples, window, tt)
      if not (rate <= bound) then violated = true; throttle = (rate - bound) / bound * ws end
    end
    if op == OP_RECORD or op == OP_NOCHECK or (op == OP_STRICT and not violated) then
      s_record(s, kind, samples, window, val, tt)
      bits = 2; recorded[ki] = true
      if op == OP_RECORD and with_bound then
        local rate
        rate, ws = s_measure(s, samples, window, tt)
        if not (rate <= bound) then violated = true; throttle = (rate - bound) / bound * ws end
      end
    end
    if violated then bits = bits + 1 end
    if op ~= OP_NOCHECK then
      if band(flags, F_RAW) ~= 0 then
        sum = s_purge_sum(s, samples, window, tt); value = sum
      else
        value, ws, sum = s_measure(s, samples, window, tt)
      end
    end
    if violated and band(flags, F_TRACK) ~= 0 then
      local max_ms = 0
      if band(flags, F_AUX) ~= 0 then max_ms = aux end
      track_throttle(key, throttle, max_ms, t, window, px)
    end
  end

  nout = nout + 1
  out[nout] = spack('<Biddd', bits, ws, value, sum, throttle)
end

for ki, s in pairs(states) do
  local kind, t = kinds[ki], last_t[ki]
  local set_ttl = false
  if kind == K_TB then
    if fresh[ki] or (recorded[ki] and t - s[4] >= refresh) then s[4] = t; set_ttl = true end
  elseif kind ~= K_CUM then
    local tt = t - s[1]
    if fresh[ki] or (recorded[ki] and tt - s[5] >= refresh) then s[5] = tt; set_ttl = true end
  end
  local raw
  if kind == K_TB then
    raw = spack('<dldl', s[1], s[2], s[3], s[4])
  elseif kind == K_CUM then
    raw = spack('<d', s[1])
  else
    raw = spack(sampled_fmt(s[4]), unpack(s, 1, 5 + 3 * s[4]))
  end
  if persistent[ki] or kind == K_CUM then
    rcall('SET', KEYS[ki], raw)
  elseif set_ttl then
    rcall('SET', KEYS[ki], raw, 'PX', px)
  else
    rcall('SET', KEYS[ki], raw, 'KEEPTTL')
  end
end

if server_now then out[nout + 1] = spack('<d', server_now) end
return table.concat(out)
