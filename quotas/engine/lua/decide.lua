-- Kafka quota decisions on a batch of sensors: one atomic call, many decisions.
--
-- KEYS[i]  a sensor key (all keys of one sensor share one hash tag; KEYS[i]..':t'
--          holds its throttle-time statistics)
-- ARGV[1]  packed decisions, each '<BBBHHidddd':
--          op, kind, flags, key index, samples, window_ms, t, value, bound, aux
-- ARGV[2]  sensor expiry in ms (Kafka: one hour without a record)
-- returns  packed outcomes, each '<Bddddd':
--          bits (1 violated, 2 recorded, 4 upper, 8 lower), value, window_ms, sum, throttle_raw, now_ms
--
-- The arithmetic follows Java's order of operations on doubles, so results equal
-- Kafka's bit for bit (Lua numbers are IEEE doubles). Sampled sensors are stored as
-- '<ldBB' (base ms, last bound, current slot, slot count) then per slot '<iid'
-- (start and last-event offsets from base, value); token buckets as '<dld'
-- (tokens, last update ms, last bound); cumulative sums as '<d'.

local OP_RECORD, OP_NOCHECK, OP_STRICT, OP_CHECK, OP_MEASURE = 1, 2, 3, 4, 5
local K_SUM, K_COUNT, K_SAMPLES, K_TB, K_CUM = 0, 1, 2, 3, 4
local F_BOUND, F_AUX, F_SERVER_TIME, F_TRACK, F_NO_EXPIRY, F_RAW = 1, 2, 4, 8, 16, 32
local LONG_MAX_D = 9223372036854775807
local REBASE = 1073741824
local INT_MIN, INT_MAX = -2147483648, 2147483647

local spack, sunpack, srep = struct.pack, struct.unpack, string.rep
local floor, ceil = math.floor, math.ceil

local function has(flags, bit)
  return flags % (bit + bit) >= bit
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

local function decode(kind, raw)
  if kind == K_TB then
    if not raw then return { tokens = 0.0, last = 0, bound = 0.0 } end
    local tokens, last, bound = sunpack('<dld', raw)
    return { tokens = tokens, last = last, bound = bound }
  elseif kind == K_CUM then
    if not raw then return { total = 0.0 } end
    return { total = (sunpack('<d', raw)) }
  end
  local s = { n = 0, cur = 0, bound = 0.0, st = {}, la = {}, va = {} }
  if not raw then return s end
  local nslots = (#raw - 18) / 16
  local v = { sunpack('<ldBB' .. srep('iid', nslots), raw) }
  local base = v[1]
  s.base, s.bound, s.cur, s.n = base, v[2], v[3], v[4]
  local j = 5
  for i = 1, s.n do
    s.st[i] = base + v[j]; s.la[i] = base + v[j + 1]; s.va[i] = v[j + 2]
    j = j + 3
  end
  return s
end

local function clamp(x)
  if x < INT_MIN then return INT_MIN end
  if x > INT_MAX then return INT_MAX end
  return x
end

local function encode(kind, s, t)
  if kind == K_TB then return spack('<dld', s.tokens, s.last, s.bound) end
  if kind == K_CUM then return spack('<d', s.total) end
  local base = s.base or t
  if t - base > REBASE or base - t > REBASE then base = t end
  s.base = base
  local args = { base, s.bound, s.cur, s.n }
  local j = 5
  for i = 1, s.n do
    args[j] = clamp(s.st[i] - base); args[j + 1] = clamp(s.la[i] - base); args[j + 2] = s.va[i]
    j = j + 3
  end
  return spack('<ldBB' .. srep('iid', s.n), unpack(args))
end

-- SampledStat ------------------------------------------------------------

local function new_slot(s, i, t)
  s.st[i] = t; s.la[i] = t; s.va[i] = 0.0
end

local function s_record(s, kind, samples, window, v, t)
  if s.n == 0 then s.n = 1; s.cur = 0; new_slot(s, 1, t) end
  local i = s.cur + 1
  if t - s.st[i] >= window then
    s.cur = (s.cur + 1) % (samples + 1)
    i = s.cur + 1
    if i > s.n then s.n = i end
    new_slot(s, i, t)
  end
  if kind == K_SUM then
    s.va[i] = s.va[i] + v
  elseif kind == K_COUNT then
    s.va[i] = s.va[i] + 1.0
  else
    s.va[i] = 1.0
  end
  s.la[i] = t
end

local function s_purge(s, samples, window, t)
  local age = samples * window
  for i = 1, s.n do
    if t - s.la[i] >= age then new_slot(s, i, t) end
  end
end

local function s_combine(s)
  local total = 0.0
  for i = 1, s.n do total = total + s.va[i] end
  return total
end

local function s_window(s, samples, window, t)
  s_purge(s, samples, window, t)
  if s.n == 0 then s.n = 1; s.cur = 0; new_slot(s, 1, t) end
  local oldest = s.st[1]
  for i = 2, s.n do
    if s.st[i] < oldest then oldest = s.st[i] end
  end
  local elapsed = t - oldest
  local q = elapsed / window
  local full
  if q >= 0 then full = floor(q) else full = ceil(q) end
  local min_full = samples - 1
  if full < min_full then elapsed = elapsed + (min_full - full) * window end
  if elapsed < 1 then elapsed = 1 end
  return elapsed
end

-- returns rate, window size, sum (the Rate.measure of Kafka)
local function s_measure(s, samples, window, t)
  s_purge(s, samples, window, t)
  local sum = s_combine(s)
  local ws = s_window(s, samples, window, t)
  return sum / (ws / 1000.0), ws, sum
end

-- TokenBucket ------------------------------------------------------------

local function tb_refill(s, q, burst, t)
  s.tokens = jmin(burst, s.tokens + q * ((t - s.last) / 1000.0))
  s.last = t
end

-- Throttle-time statistics for live charts -------------------------------

local function track_throttle(key, raw, max_ms, t, window)
  if raw ~= raw or raw <= 0 then return end
  local ms = floor(raw + 0.5)
  if max_ms > 0 and ms > max_ms then ms = max_ms end
  local tkey = key .. ':t'
  local cur = redis.call('GET', tkey)
  local ws, c, tot, mx, pc, pt, pm, all = 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
  if cur then ws, c, tot, mx, pc, pt, pm, all = sunpack('<lddddddd', cur) end
  if t - ws >= window then
    if t - ws < 2 * window then pc, pt, pm = c, tot, mx else pc, pt, pm = 0.0, 0.0, 0.0 end
    ws, c, tot, mx = t, 0.0, 0.0, 0.0
  end
  c = c + 1; tot = tot + ms
  if ms > mx then mx = ms end
  all = all + ms
  redis.call('SET', tkey, spack('<lddddddd', ws, c, tot, mx, pc, pt, pm, all), 'PX', tonumber(ARGV[2]))
end

-- The batch --------------------------------------------------------------

local buf = ARGV[1]
local expiry = tonumber(ARGV[2])
local pos, len = 1, #buf
local states, kinds, existed, recorded, persistent, last_t = {}, {}, {}, {}, {}, {}
local out, nout = {}, 0
local server_now = nil

while pos <= len do
  local op, kind, flags, ki, samples, window, t, v, bound, aux
  op, kind, flags, ki, samples, window, t, v, bound, aux, pos = sunpack('<BBBHHidddd', buf, pos)
  if has(flags, F_SERVER_TIME) then
    if not server_now then
      local tm = redis.call('TIME')
      server_now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
    end
    t = server_now
  end
  local key = KEYS[ki]
  local s = states[ki]
  if not s or kinds[ki] ~= kind then
    local raw = redis.call('GET', key)
    if raw then existed[ki] = true end
    s = decode(kind, raw)
    states[ki] = s; kinds[ki] = kind
  end
  local with_bound = has(flags, F_BOUND)
  if has(flags, F_NO_EXPIRY) then persistent[ki] = true end
  last_t[ki] = t
  local bits, value, ws, sum, throttle = 0, 0.0, 0, 0.0, 0.0

  if kind == K_TB then
    if with_bound then s.bound = bound end
    local burst = 0.0
    if with_bound then burst = (samples * (window / 1000.0)) * bound end
    local violated = false
    if op == OP_STRICT or op == OP_CHECK then
      if with_bound then
        tb_refill(s, bound, burst, t)
        if s.tokens < 0 then
          violated = true; throttle = -s.tokens / bound * 1000
        end
      end
    end
    if op == OP_RECORD or op == OP_NOCHECK or (op == OP_STRICT and not violated) then
      if with_bound then
        tb_refill(s, bound, burst, t)
        s.tokens = jmin(burst, s.tokens - v)
      end
      bits = bits + 2; recorded[ki] = true
      if op == OP_RECORD and with_bound then
        tb_refill(s, bound, burst, t)
        if s.tokens < 0 then violated = true; throttle = -s.tokens / bound * 1000 end
      end
    end
    if op == OP_MEASURE and with_bound then tb_refill(s, bound, burst, t) end
    if violated then bits = bits + 1 end
    if op ~= OP_NOCHECK then
      if with_bound then tb_refill(s, bound, burst, t); value = s.tokens else value = LONG_MAX_D end
    end
    if violated and has(flags, F_TRACK) then track_throttle(key, throttle, 0, t, window) end

  elseif kind == K_CUM then
    if op == OP_RECORD or op == OP_NOCHECK then
      s.total = s.total + v; bits = bits + 2; recorded[ki] = true
    end
    if op == OP_RECORD or op == OP_CHECK then
      if with_bound and not (s.total <= bound) then
        bits = bits + 1 + 4
      elseif has(flags, F_AUX) and not (s.total >= aux) then
        bits = bits + 1 + 8
      end
    end
    value = s.total

  else
    if with_bound then s.bound = bound end
    local violated, rate = false, 0.0
    if op == OP_STRICT or op == OP_CHECK then
      if with_bound then
        rate, ws = s_measure(s, samples, window, t)
        if not (rate <= bound) then
          violated = true; throttle = (rate - bound) / bound * ws
        end
      end
    end
    if op == OP_RECORD or op == OP_NOCHECK or (op == OP_STRICT and not violated) then
      s_record(s, kind, samples, window, v, t)
      bits = bits + 2; recorded[ki] = true
      if op == OP_RECORD and with_bound then
        rate, ws = s_measure(s, samples, window, t)
        if not (rate <= bound) then
          violated = true; throttle = (rate - bound) / bound * ws
        end
      end
    end
    if violated then bits = bits + 1 end
    if op ~= OP_NOCHECK then
      if has(flags, F_RAW) then
        s_purge(s, samples, window, t); sum = s_combine(s); value = sum
      else
        value, ws, sum = s_measure(s, samples, window, t)
      end
    end
    if violated and has(flags, F_TRACK) then
      local max_ms = 0
      if has(flags, F_AUX) then max_ms = aux end
      track_throttle(key, throttle, max_ms, t, window)
    end
  end

  nout = nout + 1
  out[nout] = spack('<Bddddd', bits, value, ws, sum, throttle, t)
end

for ki, s in pairs(states) do
  local raw = encode(kinds[ki], s, last_t[ki])
  if persistent[ki] then
    redis.call('SET', KEYS[ki], raw)
  elseif recorded[ki] or not existed[ki] then
    redis.call('SET', KEYS[ki], raw, 'PX', expiry)
  else
    redis.call('SET', KEYS[ki], raw, 'KEEPTTL')
  end
end

return table.concat(out)
