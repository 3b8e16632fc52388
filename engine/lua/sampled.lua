-- Kafka's sampled Rate and the stored sensor layouts, shared by the engine's scripts.
-- Python prepends this file to decide.lua and connection.lua when it loads them.
--
-- The arithmetic follows Java's order of operations on doubles, so results equal Kafka's
-- bit for bit (Lua numbers are IEEE doubles; times are exact integers).
--
-- Stored layouts (little endian):
--   sampled rate  '<lBBiiii' base ms, current slot, slot count (+128 when the sensor never
--                 expires), smallest last-event offset, smallest start offset, current
--                 slot's last-event offset, last-record offset; then the slot values 'd' x n;
--                 then per slot '<ii' start and last-event offsets from base (the current
--                 slot's last is the header's)
--   token bucket  '<dldl'   tokens, last update ms, last bound, last record ms
--   cumulative    '<d'      total
-- With the smallest start and last event kept in the header, a decision that neither
-- opens a slot nor purges one (nearly all of them) reads the header, the values and the
-- current slot's start: the fast path below. All sensors of the batch are read with one
-- MGET and written with one MSET.
--
-- Expiry is Kafka's: a sensor whose last record is more than `expiry` ms before a decision's
-- clock is dropped and the decision starts a fresh one (the exempt sensor never expires).
-- Keys carry no TTL; sweep.lua deletes expired sensors to give the memory back.

local K_SUM, K_COUNT, K_TB, K_CUM, K_SIMPLE = 0, 1, 3, 4, 5
local LONG_MAX_D = 9223372036854775807
local DRIFT = 1073741824
local INT_MIN, INT_MAX = -2147483648, 2147483647

local spack, sunpack, srep, ssub = struct.pack, struct.unpack, string.rep, string.sub
local floor, ceil = math.floor, math.ceil
local band = bit.band
local rcall = redis.call

-- struct formats by count, built once per count (no string building per decision)
local function fmt_cache(prefix, unit)
  return setmetatable({}, { __index = function(t, n)
    local f = prefix .. srep(unit, n)
    rawset(t, n, f)
    return f
  end })
end
local F_HEAD_VALUES = fmt_cache('<lBBiiii', 'd')
local F_TIMES = fmt_cache('<', 'ii')
local F_KEYS = fmt_cache('<', 'H')
local F_DOUBLES = fmt_cache('<', 'd')
local F_BITS = fmt_cache('<', 'B')
local F_INTS = fmt_cache('<', 'i')

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

local function clamp(x)
  if x < INT_MIN then return INT_MIN end
  if x > INT_MAX then return INT_MAX end
  return x
end

-- Rate.windowSize (padded to samples - 1 whole windows, at least 1 ms); SimpleRate's (kind 5,
-- the replication quotas) is max(elapsed, one window)
local function window_size(elapsed, samples, window, kind)
  if kind == K_SIMPLE then
    if elapsed < window then return window end
    return elapsed
  end
  local full = elapsed / window
  if full >= 0 then full = floor(full) else full = ceil(full) end
  if full < samples - 1 then elapsed = elapsed + (samples - 1 - full) * window end
  if elapsed < 1 then elapsed = 1 end
  return elapsed
end

-- Sampled state. Array part: [1] base, [2] current slot, [3] slot count, [4] smallest last
-- offset, [5] smallest start offset, [6] the current slot's last offset, [7] bound (float),
-- [8 .. 7+n] slot values. Times: s.raw + s.tpos (the stored '<ii' block, lean form; the
-- current slot's last there is stale, [6] holds it) or s.st / s.la (decoded, full form).
local HEAD_LEN = 26

-- the per-sensor bookkeeping (k kind, p never expires, t last clock, raw and tpos: the
-- stored times) is named in the constructor so the table is sized once
local function s_decode(raw, t, kind)
  if not raw then
    return { k = kind, p = false, t = t, raw = '', tpos = 1, t, 0, 0, 0, 0, 0, 0 }
  end
  local n = (#raw - HEAD_LEN) / 16
  local s = { k = kind, p = false, t = t, raw = raw, tpos = HEAD_LEN + 1 + 8 * n,
              sunpack(F_HEAD_VALUES[n], raw) }
  s[8 + n] = nil  -- unpack's next position
  if s[3] >= 128 then s[3] = s[3] - 128; s.p = true end
  return s
end

local function fresh_state(kind, t)
  if kind == K_TB then return { k = kind, p = false, t = t, 0.0, 0, 0.0, t } end
  if kind == K_CUM then return { k = kind, p = false, t = t, 0.0 } end
  return s_decode(false, t, kind)
end

-- has the sensor gone a whole expiry without a record? (Kafka's Sensor.hasExpired)
local function expired(s, kind, t, expiry)
  if s.p or kind == K_CUM then return false end
  if kind == K_TB then return t - s[4] > expiry end
  return t - (s[1] + s[7]) > expiry
end

local function s_full(s)
  if s.st then return end
  local st, la = {}, {}
  local n = s[3]
  if n > 0 then
    local v = { sunpack(F_TIMES[n], s.raw, s.tpos) }
    for i = 1, n do st[i] = v[2 * i - 1]; la[i] = v[2 * i] end
    la[s[2] + 1] = s[6]
  end
  s.st, s.la, s.raw = st, la, nil
end

-- `now` is the offset of the sensor's latest decision. A slot whose last event is 2^30 ms
-- (12 days) before it is long obsolete (purged at the next measurement, since samples x
-- window is far shorter), so its times are pulled up to now - 2^30; when now itself has
-- drifted 2^30 from base, base moves to now. Every offset then fits an int32 and no answer
-- changes.
local function s_encode(s, now)
  local n = s[3]
  local times
  if s.st then
    local st, la = s.st, s.la
    local shift = 0
    if now > DRIFT or now < -DRIFT then shift = now end
    local floor_t = now - DRIFT
    local tv, ms, ml = {}, nil, nil
    for i = 1, n do
      local a, b = st[i], la[i]
      if b < floor_t then a = floor_t; b = floor_t end
      a = clamp(a - shift); b = clamp(b - shift)
      tv[2 * i - 1] = a; tv[2 * i] = b
      if ms == nil or a < ms then ms = a end
      if ml == nil or b < ml then ml = b end
    end
    s[1] = s[1] + shift
    s[4] = ml or 0
    s[5] = ms or 0
    s[6] = tv[2 * s[2] + 2] or 0
    s[7] = clamp(s[7] - shift)
    times = spack(F_TIMES[n], unpack(tv, 1, 2 * n))
  else
    times = ssub(s.raw, s.tpos)
  end
  if s.p then s[3] = n + 128 end
  local raw = spack(F_HEAD_VALUES[n], unpack(s, 1, 7 + n)) .. times
  s[3] = n
  return raw
end

-- Full form: Kafka's SampledStat step by step. Returns true when a slot was opened.
local function f_record(s, kind, samples, window, val, tt)
  local st, la = s.st, s.la
  local i
  local opened = false
  if s[3] == 0 then
    s[3] = 1; s[2] = 0; st[1] = tt; la[1] = tt; s[8] = 0.0; i = 1; opened = true
  else
    i = s[2] + 1
    if tt - st[i] >= window then
      local cur = (s[2] + 1) % (samples + 1)
      s[2] = cur
      i = cur + 1
      if i > s[3] then s[3] = i end
      st[i] = tt; la[i] = tt; s[7 + i] = 0.0
      opened = true
    end
  end
  if kind == K_SUM or kind == K_SIMPLE then
    s[7 + i] = s[7 + i] + val
  elseif kind == K_COUNT then
    s[7 + i] = s[7 + i] + 1.0
  else
    s[7 + i] = 1.0
  end
  la[i] = tt
  return opened
end

-- purge, then the windowed total in slot order (as Kafka sums it) and the oldest start
local function f_purge_sum(s, samples, window, tt)
  local st, la = s.st, s.la
  local age = samples * window
  local sum, oldest = 0.0, nil
  for i = 1, s[3] do
    if tt - la[i] >= age then st[i] = tt; la[i] = tt; s[7 + i] = 0.0 end
    sum = sum + s[7 + i]
    if oldest == nil or st[i] < oldest then oldest = st[i] end
  end
  return sum, oldest
end

-- Rate.measure: rate, window size (ms), windowed sum
local function f_measure(s, samples, window, tt)
  local sum, oldest = f_purge_sum(s, samples, window, tt)
  if oldest == nil then
    s[3] = 1; s[2] = 0; s.st[1] = tt; s.la[1] = tt; s[8] = 0.0; oldest = tt
  end
  local ws = window_size(tt - oldest, samples, window, s.k)
  return sum / (ws / 1000.0), ws, sum
end

-- Lean form: valid while no slot is purged or opened.
local function l_measure(s, samples, window, tt)
  local sum = 0.0
  for i = 8, 7 + s[3] do sum = sum + s[i] end
  local ws = window_size(tt - s[5], samples, window, s.k)
  return sum / (ws / 1000.0), ws, sum
end

local function l_ok(s, samples, window, tt, records)
  local n = s[3]
  if n == 0 or not s.raw then return false end
  if tt - s[4] >= samples * window then return false end
  if records then
    if tt - sunpack('<i', s.raw, s.tpos + 8 * s[2]) >= window then return false end
    -- this record moves the current slot's last event; it must not be the smallest one
    if s[6] <= s[4] and n > 1 then return false end
  end
  return true
end

-- A record that opens the next slot and purges nothing (once a window for a busy sensor), done
-- on the decoded times without the full form: Kafka's advance (reset or append the next slot),
-- update, then the measurement's purge check. Returns false, changing nothing, when the
-- measurement after it would purge a slot (the full path does that).
local function l_roll_record(s, kind, samples, window, val, tt)
  local n, cur = s[3], s[2]
  local tv = { sunpack(F_TIMES[n], s.raw, s.tpos) }
  tv[2 * n + 1] = nil
  tv[2 * cur + 2] = s[6]  -- the current slot's last event lives in the header
  local nxt = (cur + 1) % (samples + 1)
  local ni = nxt + 1
  local n2 = n
  if ni > n then n2 = ni end
  tv[2 * ni - 1] = tt; tv[2 * ni] = tt
  local age = samples * window
  local ms, ml = nil, nil
  for k = 1, n2 do
    local a, b = tv[2 * k - 1], tv[2 * k]
    if tt - b >= age then return false end
    if ms == nil or a < ms then ms = a end
    if ml == nil or b < ml then ml = b end
  end
  local vi = 7 + ni
  if kind == K_SUM or kind == K_SIMPLE then
    s[vi] = 0.0 + val
  elseif kind == K_COUNT then
    s[vi] = 0.0 + 1.0
  else
    s[vi] = 1.0
  end
  s[2] = nxt; s[3] = n2; s[4] = ml; s[5] = ms; s[6] = tt; s[7] = tt
  s.raw = spack(F_TIMES[n2], unpack(tv, 1, 2 * n2)); s.tpos = 1
  return true
end

local function l_record(s, kind, val, tt)
  local i = 8 + s[2]
  if kind == K_SUM or kind == K_SIMPLE then
    s[i] = s[i] + val
  elseif kind == K_COUNT then
    s[i] = s[i] + 1.0
  else
    s[i] = 1.0
  end
  s[6] = tt; s[7] = tt
  if s[3] == 1 or tt < s[4] then s[4] = tt end  -- a clock that stepped back moves the smallest last event
end

