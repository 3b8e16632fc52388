-- Kafka quota decisions on a batch of sensors: one atomic call, many decisions.
--
-- KEYS[i]  a sensor key (all keys of one sensor share one hash tag; KEYS[i]..':t'
--          holds its throttle-time statistics)
-- ARGV[1]  segments; each is a header '<BBHidH' (op*16+kind, flags, samples, window_ms,
--          aux, count) and its `count` decisions as columns: key indexes 'H', clocks 'd',
--          values 'd', bounds 'd'
-- ARGV[2]  sensor expiry in ms (Kafka: one hour without a record)
-- returns  per segment, columns: bits 'B' (1 violated, 2 recorded, 4 upper, 8 lower), window
--          sizes 'i' (F_FULL only), values 'd', sums 'd' (F_FULL only), raw throttles 'd';
--          then '<d' of the server clock when a decision used it.
--

local OP_RECORD, OP_NOCHECK, OP_STRICT, OP_CHECK, OP_MEASURE = 1, 2, 3, 4, 5
local F_BOUND, F_AUX, F_SERVER_TIME, F_TRACK, F_NO_EXPIRY, F_RAW, F_FULL = 1, 2, 4, 8, 16, 32, 64

-- Throttle-time statistics for live charts -------------------------------

local function track_throttle(key, raw, max_ms, t, window, px)
  if raw ~= raw or raw <= 0 then return end
  local ms = floor(raw)
  if raw - ms >= 0.5 then ms = ms + 1 end  -- Math.round, exactly
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
local pos, len = 1, #buf
local raws = rcall('MGET', unpack(KEYS))
local states = {}  -- key index -> state; state.k kind, .p never expires, .t last clock
local chunks = {}
local server_now = nil

while pos <= len do
  local opkind, flags, samples, window, aux, count
  opkind, flags, samples, window, aux, count, pos = sunpack('<BBHidH', buf, pos)
  local op, kind = floor(opkind / 16), opkind % 16
  local with_bound = band(flags, F_BOUND) ~= 0
  local track = band(flags, F_TRACK) ~= 0
  local full_out = band(flags, F_FULL) ~= 0
  local raw_stat = band(flags, F_RAW) ~= 0
  local no_expiry = band(flags, F_NO_EXPIRY) ~= 0
  local max_ms = 0
  if band(flags, F_AUX) ~= 0 then max_ms = aux end
  local use_server_time = band(flags, F_SERVER_TIME) ~= 0
  if use_server_time and not server_now then
    local tm = rcall('TIME')
    server_now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
  end
  -- columns: key indexes, clocks, values, bounds
  local kis = { sunpack(F_KEYS[count], buf, pos) }
  pos = pos + 2 * count
  local d = { sunpack(F_DOUBLES[3 * count], buf, pos) }
  pos = pos + 24 * count
  local obits, ows, oval, osum, othr = {}, {}, {}, {}, {}
  local records = op == OP_RECORD or op == OP_NOCHECK or op == OP_STRICT

  for j = 1, count do
    local ki, t, val, bound = kis[j], d[j], d[count + j], d[2 * count + j]
    if use_server_time then t = server_now end
    local s = states[ki]
    if not s or s.k ~= kind then
      local raw = raws[ki]
      if not raw then
        s = fresh_state(kind, t)
      elseif kind == K_TB then
        s = { k = kind, p = false, t = t, sunpack('<dldl', raw) }
      elseif kind == K_CUM then
        s = { k = kind, p = false, t = t, (sunpack('<d', raw)) }
      else
        s = s_decode(raw, t, kind)
      end
      states[ki] = s
    end
    if no_expiry then
      s.p = true
    elseif expired(s, kind, t, expiry) then
      s = fresh_state(kind, t); states[ki] = s
    end
    s.t = t
    local bits, value, ws, sum, throttle = 0, 0.0, 0, 0.0, 0.0
    local violated = false

    if kind == K_TB then
      -- s = { tokens, last update ms, bound, TTL refresh ms }; TokenBucket.refill is
      -- tokens = min(burst, tokens + Q * dt/1000): `y < burst` is Java's min whenever it holds
      local tokens, last = s[1], s[2]
      local burst, y = 0.0, 0.0
      if with_bound then
        s[3] = bound
        burst = (samples * (window / 1000.0)) * bound
        if op == OP_STRICT or op == OP_CHECK then
          y = tokens + bound * ((t - last) / 1000.0)
          if y < burst then tokens = y else tokens = jmin(burst, y) end
          last = t
          if tokens < 0 then violated = true; throttle = -tokens / bound * 1000 end
        end
      end
      if op == OP_RECORD or op == OP_NOCHECK or (op == OP_STRICT and not violated) then
        if with_bound then
          y = tokens + bound * ((t - last) / 1000.0)
          if y < burst then tokens = y else tokens = jmin(burst, y) end
          last = t
          y = tokens - val
          if y < burst then tokens = y else tokens = jmin(burst, y) end
          if op == OP_RECORD then
            y = tokens + bound * ((t - last) / 1000.0)
            if y < burst then tokens = y else tokens = jmin(burst, y) end
            if tokens < 0 then violated = true; throttle = -tokens / bound * 1000 end
          end
        end
        bits = 2
      end
      if op ~= OP_NOCHECK then
        if with_bound then
          y = tokens + bound * ((t - last) / 1000.0)
          if y < burst then tokens = y else tokens = jmin(burst, y) end
          last = t
          value = tokens
        else
          value = LONG_MAX_D
        end
      end
      s[1], s[2] = tokens, last
      if bits == 2 then s[4] = t end

    elseif kind == K_CUM then
      if op == OP_RECORD or op == OP_NOCHECK then
        s[1] = s[1] + val; bits = 2
      end
      if op == OP_RECORD or op == OP_CHECK then
        if with_bound and not (s[1] <= bound) then
          violated = true; bits = bits + 4
        elseif band(flags, F_AUX) ~= 0 and not (s[1] >= aux) then
          violated = true; bits = bits + 8
        end
      end
      value = s[1]

    else
      local tt = t - s[1]
      local n = s[3]
      local lean_record = false
      if op == OP_RECORD and n > 0 and s.raw then
        if tt - sunpack('<i', s.raw, s.tpos + 8 * s[2]) < window then
          if tt - s[4] < samples * window and (s[6] > s[4] or n == 1) then
            -- the most common decision, inline: a record into the current slot, nothing purged
            local i = 8 + s[2]
            if kind == K_SUM or kind == K_SIMPLE then s[i] = s[i] + val elseif kind == K_COUNT then s[i] = s[i] + 1.0 else s[i] = 1.0 end
            s[6] = tt; s[7] = tt
            if n == 1 or tt < s[4] then s[4] = tt end  -- a clock that stepped back moves the smallest last event
            lean_record = true
          end
        else
          lean_record = l_roll_record(s, kind, samples, window, val, tt)
        end
      end
      if lean_record then
        n = s[3]
        bits = 2
        sum = 0.0
        for k = 8, 7 + n do sum = sum + s[k] end
        ws = window_size(tt - s[5], samples, window, kind)
        value = sum / (ws / 1000.0)
        if with_bound and not (value <= bound) then
          violated = true; throttle = (value - bound) / bound * ws
        end
      elseif not raw_stat and l_ok(s, samples, window, tt, records) then
        -- fast path: nothing purged, nothing opened
        if op == OP_RECORD or op == OP_NOCHECK then
          l_record(s, kind, val, tt)
          bits = 2
          if op == OP_RECORD then
            value, ws, sum = l_measure(s, samples, window, tt)
            if with_bound and not (value <= bound) then
              violated = true; throttle = (value - bound) / bound * ws
            end
          end
        else
          value, ws, sum = l_measure(s, samples, window, tt)
          if with_bound and op ~= OP_MEASURE and not (value <= bound) then
            violated = true; throttle = (value - bound) / bound * ws
          end
          if op == OP_STRICT and not violated then
            l_record(s, kind, val, tt)
            bits = 2
            value, ws, sum = l_measure(s, samples, window, tt)
          end
        end
      else
        s_full(s)
        if with_bound and (op == OP_STRICT or op == OP_CHECK) then
          local rate
          rate, ws = f_measure(s, samples, window, tt)
          if not (rate <= bound) then violated = true; throttle = (rate - bound) / bound * ws end
        end
        local measured = false
        if op == OP_RECORD or op == OP_NOCHECK or (op == OP_STRICT and not violated) then
          f_record(s, kind, samples, window, val, tt)
          s[7] = tt
          bits = 2
          if op == OP_RECORD then
            -- Sensor.record's check measures once; measuring again at the same t changes nothing
            value, ws, sum = f_measure(s, samples, window, tt)
            measured = true
            if with_bound and not (value <= bound) then violated = true; throttle = (value - bound) / bound * ws end
          end
        end
        if op ~= OP_NOCHECK and not measured then
          if raw_stat then
            sum = f_purge_sum(s, samples, window, tt); value = sum
          else
            value, ws, sum = f_measure(s, samples, window, tt)
          end
        end
      end
    end

    if violated then
      bits = bits + 1
      if track then track_throttle(KEYS[ki], throttle, max_ms, t, window, expiry) end
    end
    obits[j], ows[j], oval[j], osum[j], othr[j] = bits, ws, value, sum, throttle
  end
  -- answers as columns: bits, [window sizes], values, [sums], raw throttles
  chunks[#chunks + 1] = spack(F_BITS[count], unpack(obits, 1, count))
  if full_out then chunks[#chunks + 1] = spack(F_INTS[count], unpack(ows, 1, count)) end
  chunks[#chunks + 1] = spack(F_DOUBLES[count], unpack(oval, 1, count))
  if full_out then chunks[#chunks + 1] = spack(F_DOUBLES[count], unpack(osum, 1, count)) end
  chunks[#chunks + 1] = spack(F_DOUBLES[count], unpack(othr, 1, count))
end

local mset, nm = {}, 0
for ki, s in pairs(states) do
  local kind = s.k
  local raw
  if kind == K_TB then
    raw = spack('<dldl', s[1], s[2], s[3], s[4])
  elseif kind == K_CUM then
    raw = spack('<d', s[1])
  else
    local tt = s.t - s[1]
    if s.raw and (tt > DRIFT or tt < -DRIFT) then s_full(s) end
    raw = s_encode(s, tt)
  end
  mset[nm + 1] = KEYS[ki]; mset[nm + 2] = raw
  nm = nm + 2
end
if nm > 0 then rcall('MSET', unpack(mset, 1, nm)) end

if server_now then chunks[#chunks + 1] = spack('<d', server_now) end
return table.concat(chunks)
