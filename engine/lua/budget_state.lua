-- One budget's state as budget_share.lua keeps it, for readers (the portal, tests): per broker in ascending id,
-- five strings: broker id, demand, saturated ('1' or '0'), last report (ms) and held share ('' when none yet).
-- KEYS[1] qb:{C}:b:<budget id>. A key of another type (the layout before) reads as no brokers.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) ~= 'string' then
  return {}
end
local state = cmsgpack.unpack(raw)
local out = {}
for j = 1, #state[1] do
  out[#out + 1] = string.format('%d', state[1][j])
  out[#out + 1] = string.format('%.17g', state[2][j])
  out[#out + 1] = state[3][j] and '1' or '0'
  out[#out + 1] = string.format('%d', state[4][j])
  out[#out + 1] = state[5][j] and string.format('%.17g', state[5][j]) or ''
end
return out
