-- One budget's state as budget_share.lua keeps it, for readers (the portal, tests): per broker in ascending id,
-- five strings: broker id, demand, saturated ('1' or '0'), last round (ms) and held share ('' when none yet).
-- KEYS[1] qb:{C}:b:<budget id>; each broker's last round (the lease of its entries) is read from qb:{C}:brokers,
-- the same slot. A hash of a layout before reads as no brokers.
local raw = redis.call('HGET', KEYS[1], 'st')
if not raw then
  return {}
end
local state = cmsgpack.unpack(raw)
if state[7] ~= 3 then
  return {}
end
local brokers = string.match(KEYS[1], '^(qb:%b{}:)b:') .. 'brokers'
local held = cmsgpack.unpack(redis.call('HGET', KEYS[1], 'sh'))
local out = {}
for j = 1, #state[1] do
  local id = string.format('%d', state[1][j])
  out[#out + 1] = id
  out[#out + 1] = string.format('%.17g', state[2][j])
  out[#out + 1] = state[3][j] and '1' or '0'
  out[#out + 1] = redis.call('HGET', brokers, id) or ''
  out[#out + 1] = held[j] and string.format('%.17g', held[j]) or ''
end
return out
