-- Delete quota sensors that went a whole expiry without a record, to give their memory back.
-- Decisions already treat such a sensor as gone (decide.lua); this only reclaims space.
--
-- KEYS     candidate sensor keys (one slot in Redis Cluster)
-- ARGV[1]  now (ms), ARGV[2] expiry (ms)
-- returns  how many were deleted
--
-- Layouts are told apart by length: a token bucket is 32 bytes ('<dldl', last record at
-- byte 25), a sampled rate 26 + 16 n ('<lBBiiii' header: n at byte 10, +128 = never
-- expires; last-record offset from base at byte 23); other lengths never expire here.

local sunpack = struct.unpack
local now, expiry = tonumber(ARGV[1]), tonumber(ARGV[2])
local deleted = 0
for _, key in ipairs(KEYS) do
  local raw = redis.pcall('GET', key)  -- other structures of the namespace (a hash) are not sensors
  if type(raw) == 'string' then
    local len = #raw
    local last = nil
    if len == 32 then
      last = sunpack('<l', raw, 25)
    elseif len >= 26 and (len - 26) % 16 == 0 and sunpack('B', raw, 10) < 128 then
      last = sunpack('<l', raw) + sunpack('<i', raw, 23)
    end
    if last and now - last > expiry then
      redis.call('DEL', key, key .. ':t')
      deleted = deleted + 1
    end
  end
end
return deleted
