-- Kafka's ConnectionQuotas for one broker: a batch of acceptor operations in one atomic call.
--
-- KEYS[1]  the counts hash (fields: total, l:<listener>, i:<ip>)
-- KEYS[2]  the broker connection-rate sensor; KEYS[3 .. 2+L] the listeners' sensors;
--          KEYS[3+L ..] the IPs' sensors (all under the broker's hash tag)
-- ARGV[1]  operations, each '<BHHd': op, listener index (1..L), ip index (0 = none), t
--          op: 1 inc, 2 inc after waiting, 3 dec, 4 get, 5/6/7 measure the ip / listener /
--          broker rate, 8 max connections exceeded
-- ARGV[2]  IP sensor expiry (ms); the broker and listener sensors never expire
-- ARGV[3]  '<HiidiH' samples, window ms, max throttle ms, broker rate, broker max connections,
--          L; ARGV[4] per listener '<diB' rate, max connections, protected;
--          ARGV[5] per ip '<di' rate (2147483647 = no quota), max connections
-- returns  per operation '<Biiid': result (1 accepted, 2 ip throttled, 3 too many connections,
--          4 blocked, 5 ok, 6 a value, 7 no connections to release), throttle ms, the IP's
--          count, the broker's total, value (a rate, or 1/0; NaN when the sensor is absent; for a
--          blocked admission the epoch to hand to wait_for_slot)
-- A closing connection (dec) publishes on KEYS[1] so waiting acceptors re-check their slot.

local sensors_raw = {}
do
  local keys = {}
  for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
  local raws = rcall('MGET', unpack(keys))
  for i = 2, #KEYS do sensors_raw[i] = raws[i - 1] end
end
local expiry = tonumber(ARGV[2])
local samples, window, max_throttle, broker_rate, broker_max, nl = sunpack('<HiidiH', ARGV[3])
local l_rate, l_max, l_prot, l_name = {}, {}, {}, {}
do
  local v = { sunpack(srep('<diB', nl), ARGV[4]) }
  for i = 1, nl do
    l_rate[i], l_max[i], l_prot[i] = v[3 * i - 2], v[3 * i - 1], v[3 * i] == 1
    l_name[i] = ARGV[5 + i]
  end
end
local nip = #ARGV[5] / 12
local ip_rate, ip_max, ip_name = {}, {}, {}
do
  local v = { sunpack(srep('<di', nip), ARGV[5]) }
  for i = 1, nip do ip_rate[i], ip_max[i], ip_name[i] = v[2 * i - 1], v[2 * i], ARGV[5 + nl + i] end
end

-- counts: read the fields this batch can touch, write back the changed ones; epoch counts the
-- releases and limit changes, so an acceptor that subscribes late still sees it missed one
local cfields = { 'total', 'epoch' }
for i = 1, nl do cfields[#cfields + 1] = 'l:' .. l_name[i] end
for i = 1, nip do cfields[#cfields + 1] = 'i:' .. ip_name[i] end
local cvals = rcall('HMGET', KEYS[1], unpack(cfields))
local total = tonumber(cvals[1]) or 0
local epoch = tonumber(cvals[2]) or 0
local lcount, icount = {}, {}
for i = 1, nl do lcount[i] = tonumber(cvals[2 + i]) or 0 end
for i = 1, nip do icount[i] = tonumber(cvals[2 + nl + i]) or 0 end
local released = false

local states = {}
local function sensor(ki, t, persistent)
  local s = states[ki]
  if not s then
    local raw = sensors_raw[ki]
    if raw then s = s_decode(raw, t, K_SUM) else s = fresh_state(K_SUM, t) end
    s.p = persistent
    states[ki] = s
  end
  if not persistent and expired(s, K_SUM, t, expiry) then
    s = fresh_state(K_SUM, t); states[ki] = s
  end
  s.t = t
  return s
end

-- Sensor.record(v, t, checkQuotas) on a rate sensor; returns the bounded throttle (0 within the rate).
-- The lean path of sampled.lua when the record neither opens nor purges a slot.
local function record(s, v, t, bound)
  local tt = t - s[1]
  local rate, ws
  local lean = l_ok(s, samples, window, tt, true)
  if lean then
    l_record(s, K_SUM, v, tt)
  elseif s.raw and s[3] > 0 and tt - sunpack('<i', s.raw, s.tpos + 8 * s[2]) >= window then
    lean = l_roll_record(s, K_SUM, samples, window, v, tt)
  end
  if lean then
    if not bound then return 0 end
    rate, ws = l_measure(s, samples, window, tt)
  else
    s_full(s)
    f_record(s, K_SUM, samples, window, v, tt)
    s[7] = tt
    if not bound then return 0 end
    rate, ws = f_measure(s, samples, window, tt)
  end
  if rate <= bound then return 0 end
  local x = (rate - bound) / bound * ws
  if x ~= x then return 0 end
  local r = floor(x)
  if x - r >= 0.5 then r = r + 1 end
  if r > max_throttle then r = max_throttle end  -- QuotaUtils.boundedThrottleTime
  return r
end

local function slot_available(li)
  if lcount[li] >= l_max[li] then return false end
  if l_prot[li] then return true end
  return total < broker_max
end

local out = {}
local ops = ARGV[1]
local n = #ops / 13
local v = { sunpack(srep('<BHHd', n), ops) }
for j = 1, n do
  local op, li, ii, t = v[4 * j - 3], v[4 * j - 2], v[4 * j - 1], v[4 * j]
  local res, throttle, value = 6, 0, 0.0
  local lkey, ikey = 2 + li, 2 + nl + ii
  local go = false
  if op == 1 then
    if l_prot[li] then
      throttle = record(sensor(lkey, t, true), 1.0, t, l_rate[li])
    else
      throttle = record(sensor(2, t, true), 1.0, t, broker_rate)
      local lt = record(sensor(lkey, t, true), 1.0, t, l_rate[li])
      if lt > throttle then throttle = lt end
    end
    if throttle < 0 then throttle = 0 end
    if throttle > 0 or not slot_available(li) then res = 4; value = epoch else go = true end
  elseif op == 2 then
    if slot_available(li) then go = true else res = 4; value = epoch end
  elseif op == 3 then
    if icount[ii] == 0 then
      res = 7
    else
      icount[ii] = icount[ii] - 1
      total = total - 1
      if lcount[li] > 0 then lcount[li] = lcount[li] - 1 end
      res = 5
      released = true
      epoch = epoch + 1
    end
  elseif op == 4 then
    res = 6
  elseif op == 5 then
    if sensors_raw[ikey] or states[ikey] then
      local s = sensor(ikey, t, false)
      s_full(s)
      value = f_measure(s, samples, window, t - s[1])
    else
      value = 0 / 0
    end
  elseif op == 6 or op == 7 then
    local s = sensor(op == 6 and lkey or 2, t, true)
    s_full(s)
    value = f_measure(s, samples, window, t - s[1])
  elseif op == 8 then
    if total > broker_max and not l_prot[li] then value = 1 end
  end
  if go then
    local rate = ip_rate[ii]
    if rate ~= 2147483647 then
      local s = sensor(ikey, t, false)
      throttle = record(s, 1.0, t, rate)
      if throttle > 0 then
        -- a dropped connection must not count: un-record it from the IP, broker and listener rates
        record(s, -1.0, t, nil)
        if not l_prot[li] then record(sensor(2, t, true), -1.0, t, nil) end
        record(sensor(lkey, t, true), -1.0, t, nil)
        res = 2
      end
    end
    if res ~= 2 then
      local count = icount[ii]
      icount[ii] = count + 1
      total = total + 1
      lcount[li] = lcount[li] + 1
      if count >= ip_max[ii] then res = 3 else res = 1 end
    end
  end
  local c = 0
  if ii > 0 then c = icount[ii] end
  out[5 * j - 4], out[5 * j - 3], out[5 * j - 2], out[5 * j - 1], out[5 * j] = res, throttle, c, total, value
end

-- write back
local mset, nm = {}, 0
for ki, s in pairs(states) do
  mset[nm + 1] = KEYS[ki]; mset[nm + 2] = s_encode(s, s.t - s[1])
  nm = nm + 2
end
if nm > 0 then rcall('MSET', unpack(mset, 1, nm)) end
local hset, nh = { 'total', total, 'epoch', epoch }, 4
local gone = {}
for i = 1, nl do hset[nh + 1] = 'l:' .. l_name[i]; hset[nh + 2] = lcount[i]; nh = nh + 2 end
for i = 1, nip do
  if icount[i] > 0 then
    hset[nh + 1] = 'i:' .. ip_name[i]; hset[nh + 2] = icount[i]; nh = nh + 2
  else
    gone[#gone + 1] = 'i:' .. ip_name[i]
  end
end
rcall('HSET', KEYS[1], unpack(hset, 1, nh))
if #gone > 0 then rcall('HDEL', KEYS[1], unpack(gone)) end
if released then rcall('PUBLISH', KEYS[1], 'released') end
return spack(srep('<Biiid', n), unpack(out, 1, 5 * n))
