-- One budget's state as budget_share.lua keeps it, for readers (the portal, tests): per broker in ascending id,
-- five strings: broker id, demand, saturated ('1' or '0'), last report (ms) and held share ('' when none yet).
-- KEYS[1] qb:{C}:b:<budget id>. A hash of the layout before (no 'st' field) reads as no brokers.
local raw = redis.call('HGET', KEYS[1], 'st')
if not raw then
  return {}
end
local state = cmsgpack.unpack(raw)
local out = {}
for j = 1, #state[1] do
  local id = string.format('%d', state[1][j])
  out[#out + 1] = id
  out[#out + 1] = string.format('%.17g', state[2][j])
  out[#out + 1] = state[3][j] and '1' or '0'
  out[#out + 1] = redis.call('HGET', KEYS[1], 't:' .. id) or ''
  out[#out + 1] = state[4][j] and string.format('%.17g', state[4][j]) or ''
end
return out
