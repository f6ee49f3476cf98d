// The Redis limiter: admission, holds and pending debits in Lua scripts, so many instances agree and a dead one loses nothing.
import { createHash, randomBytes } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { openRedis, type Corked, type RedisClient } from './redis-connect.js';
import { quotaArg, type AdmitInput, type AdmitOutcome, type CommittedState, type ExtendInput, type ExtendOutcome, type Limiter, type PendingDebit, type QuotaDim, type QuotaState, type QuotaUse } from './types.js';

// Every script touches one hash slot (so a Redis Cluster runs it on one node): per account, under the
// account's hash tag `{<account>}` (a key's own keys too, since its scripts also touch its account's):
//   sum   hash: total (holds + pending debits), a:<key> (the key's share), n:<key> (its requests in flight),
//               bal/bver (committed balance and its version), sd:<key>/sm:<key> ("start|spent|version")
//   holds hash: hold id -> "key|amount|owner"      exp zset: hold id -> expiry (ms)
//   run   hash: hold id -> "amount|entry"          (what an open stream has produced: billed if its owner dies)
//   pend  hash: debit id -> "key|amount|owner|entry" (priced, not yet committed to PostgreSQL)
//   rpm:<key> hash: the key's request bucket (t tokens, ts time).
// The instance registry, under the tag `{registry}` (one slot; single-key scripts and same-slot MULTIs only), at
// `{registry}:q:` since the settle queue (RedisLimiter.registry says why):
//   instances zset (owner -> last heartbeat, Redis time), inst:<owner>:accts set (accounts it touched), recover:<owner> lease.
/** Arguments of one request in an admission call (ADMIT). */
const ADMIT_ARGS = 16;

const LIB = `
local function add(sum, k, amt)
  if amt == '0' or amt == '-0' then return end
  redis.call('HINCRBY', sum, 'total', amt)
  if redis.call('HINCRBY', sum, 'a:' .. k, amt) == 0 then redis.call('HDEL', sum, 'a:' .. k) end
end
local function neg(amt) return '-' .. amt end
-- A key's per-minute usage buckets (tokens, characters, audio ms), under the account's hash tag:
--   <base>:q:<key> hash: <dim>v (level) and <dim>s (its time, ms); full at the limit, refilled at the limit per minute.
--   <base>:resv hash: hold id -> "key|dim:limit:need,..." (what its admission took; given back when the hold is dropped).
-- Their names derive from the account's sum key (same slot); specs are "dim:limit:n" lists.
local function qbase(sum) return string.sub(sum, 1, -9) end
local function qnow() local t = redis.call('TIME'); return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
local function qlevel(qk, d, limit, now)
  local b = redis.call('HMGET', qk, d .. 'v', d .. 's')
  local v = tonumber(b[1]) or limit
  return math.min(limit, v + math.max(0, now - (tonumber(b[2]) or now)) * limit / 60000)
end
local function qset(qk, d, limit, v, now)
  redis.call('HSET', qk, d .. 'v', tostring(v), d .. 's', tostring(now))
  -- Kept until full again (a level below zero takes longer), and a minute more.
  redis.call('PEXPIRE', qk, math.ceil((limit - v) * 60000 / limit) + 60000)
end
-- Adds sign * n to each bucket of the spec, never above full.
local function qmove(sum, k, spec, sign, now)
  if spec == nil or spec == '' then return end
  local qk = qbase(sum) .. ':q:' .. k
  for d, l, n in string.gmatch(spec, '(%a):(%d+):(%d+)') do
    local limit = tonumber(l)
    qset(qk, d, limit, math.min(limit, qlevel(qk, d, limit, now) + sign * tonumber(n)), now)
  end
end
-- Adds sign * spec to hold r's reservation record (what dropping it gives back): a session's parts add theirs and take them off as they end.
local function qresv(sum, r, k, spec, sign)
  if spec == nil or spec == '' then return end
  local resv = qbase(sum) .. ':resv'
  local rec = redis.call('HGET', resv, r)
  local cur, order = {}, {}
  if rec then
    local _, s = string.match(rec, '^([^|]*)|(.*)$')
    for d, l, n in string.gmatch(s, '(%a):(%d+):(%d+)') do cur[d] = {l, tonumber(n)}; table.insert(order, d) end
  end
  for d, l, n in string.gmatch(spec, '(%a):(%d+):(%d+)') do
    if not cur[d] then cur[d] = {l, 0}; table.insert(order, d) end
    cur[d][1] = l
    cur[d][2] = math.max(0, cur[d][2] + sign * tonumber(n))
  end
  local parts = {}
  for _, d in ipairs(order) do if cur[d][2] > 0 then table.insert(parts, d .. ':' .. cur[d][1] .. ':' .. string.format('%d', cur[d][2])) end end
  if #parts == 0 then redis.call('HDEL', resv, r) else redis.call('HSET', resv, r, k .. '|' .. table.concat(parts, ',')) end
end
local function qrefund(sum, r)
  local resv = qbase(sum) .. ':resv'
  local rec = redis.call('HGET', resv, r)
  if not rec then return end
  redis.call('HDEL', resv, r)
  local k, spec = string.match(rec, '^([^|]*)|(.*)$')
  qmove(sum, k, spec, 1, qnow())
end
-- The pending (priced, uncommitted) part of total, by account and by key: what key inspection reports.
local function pending(sum, k, amt)
  if amt == '0' or amt == '-0' then return end
  if redis.call('HINCRBY', sum, 'pending', amt) == 0 then redis.call('HDEL', sum, 'pending') end
  if redis.call('HINCRBY', sum, 'p:' .. k, amt) == 0 then redis.call('HDEL', sum, 'p:' .. k) end
end
-- Frees a hold: its amount, its slot, its running record. Returns its key id and amount, or nil.
local function drop(sum, holds, exp, run, r)
  qrefund(sum, r)
  local rec = redis.call('HGET', holds, r)
  redis.call('ZREM', exp, r)
  redis.call('HDEL', run, r)
  if not rec then return nil end
  local k, amt = string.match(rec, '^([^|]*)|(%d+)')
  add(sum, k, neg(amt))
  if redis.call('HINCRBY', sum, 'n:' .. k, -1) <= 0 then redis.call('HDEL', sum, 'n:' .. k) end
  redis.call('HDEL', holds, r)
  return k
end
-- A hold past its deadline is dropped, unless a running record is under it: that is a stream's output so
-- far, whose owner is still streaming (a stream may outlast the hold's life: the upstream's timeout cuts
-- only an idle reply) or died before anyone took over (every instance down that long). Dropped with the
-- hold, it would be billed by no one; kept, its owner settles it or a takeover bills it, and its records
-- outlive it by MARGIN. The hold is looked at again in a minute.
local function expire(sum, holds, exp, run, r, now)
  if redis.call('HEXISTS', run, r) == 1 and redis.call('HEXISTS', holds, r) == 1 then
    redis.call('ZADD', exp, now + 60000, r)
  else
    drop(sum, holds, exp, run, r)
  end
end
-- Whether a committed value passed in is newer than the one Redis holds (cur: its text, or nil).
local function balance_newer(cur, ver) return not cur or tonumber(cur) < tonumber(ver) end
local function spend_newer(cur, start, ver)
  if not cur then return true end
  local s0, _, v0 = string.match(cur, '^([^|]*)|(%d+)|(%d+)$')
  return not (s0 > start or (s0 == start and tonumber(v0) >= tonumber(ver)))
end
-- Takes a committed value if it is newer than what Redis holds.
local function newer_balance(sum, bal, ver)
  if bal == '' then return end
  if balance_newer(redis.call('HGET', sum, 'bver'), ver) then redis.call('HSET', sum, 'bal', bal, 'bver', ver) end
end
local function newer_spend(sum, field, start, spent, ver)
  if spend_newer(redis.call('HGET', sum, field), start, ver) then redis.call('HSET', sum, field, start .. '|' .. spent .. '|' .. ver) end
end
-- A call's moves of the sum hash's counters (total, a:/p:/n: fields, pending), written once per field at the
-- end (flush): a script runs alone, so no one sees the deferred write, and the final value is what moving
-- each at once would leave. A field left at 0 is removed, except total; an n: field at or below 0 is
-- removed too, as drop() removes it. A move of more digits than a Lua number adds exactly is written at
-- once. value(f) is the field as the moves so far left it. Methods on a metatable, not closures: a
-- call makes one table per instance (with the Functions library, the methods are defined once).
local Counters = {}
Counters.__index = Counters
local function counters(sum) return setmetatable({sum = sum, delta = {}, base = {}, order = {}}, Counters) end
function Counters:touch(f) if not self.delta[f] then self.delta[f] = 0; table.insert(self.order, f) end end
function Counters:write(f, text)
  local v = redis.call('HINCRBY', self.sum, f, text)
  if (v == 0 and f ~= 'total') or (v < 0 and string.sub(f, 1, 2) == 'n:') then redis.call('HDEL', self.sum, f); v = 0 end
  if self.base[f] then self.base[f] = v end
end
function Counters:flush(f)
  if self.delta[f] ~= 0 then self:write(f, string.format('%d', self.delta[f])); self.delta[f] = 0 end
end
function Counters:move(f, text)
  self:touch(f)
  if string.len(text) > 15 or math.abs(self.delta[f]) >= 2 ^ 52 then self:flush(f); self:write(f, text); return end
  self.delta[f] = self.delta[f] + tonumber(text)
end
function Counters:value(f)
  self:touch(f)
  if not self.base[f] then self.base[f] = tonumber(redis.call('HGET', self.sum, f) or '0') end
  return self.base[f] + self.delta[f]
end
function Counters:flushAll() for _, f in ipairs(self.order) do self:flush(f) end end
-- add() and pending() above, on the call's counters.
function Counters:add(k, amt)
  if amt == '0' or amt == '-0' then return end
  self:move('total', amt); self:move('a:' .. k, amt)
end
function Counters:pending(k, amt)
  if amt == '0' or amt == '-0' then return end
  self:move('pending', amt); self:move('p:' .. k, amt)
end
-- Runs cmd on key with the items as arguments, a thousand at a time.
local function chunked(cmd, key, items)
  for i = 1, #items, 1000 do redis.call(cmd, key, unpack(items, i, math.min(#items, i + 999))) end
end
-- A call's view of a hash: fields read ahead in one HMGET (load) or on first use, written and removed
-- once at the end (flush), with the same effect as each write made at once.
local HashView = {}
HashView.__index = HashView
local function hashview(key) return setmetatable({key = key, cache = {}, sets = {}, dels = {}}, HashView) end
function HashView:load(fields)
  local part, seen, cache = {}, {}, self.cache
  for _, f in ipairs(fields) do
    if cache[f] == nil and not seen[f] then seen[f] = true; table.insert(part, f) end
  end
  for i = 1, #part, 1000 do
    local last = math.min(#part, i + 999)
    local r = redis.call('HMGET', self.key, unpack(part, i, last))
    for j = i, last do cache[part[j]] = r[j - i + 1] end
  end
end
function HashView:get(f)
  local x = self.cache[f]
  if x == nil then x = redis.call('HGET', self.key, f); self.cache[f] = x end
  return x or nil
end
function HashView:set(f, val) self.cache[f] = val; self.sets[f] = true; self.dels[f] = nil end
function HashView:del(f) self.cache[f] = false; self.sets[f] = nil; self.dels[f] = true end
function HashView:flush()
  local pairs_, gone = {}, {}
  for f in pairs(self.sets) do table.insert(pairs_, f); table.insert(pairs_, self.cache[f]) end
  for f in pairs(self.dels) do table.insert(gone, f) end
  if #pairs_ > 0 then chunked('HSET', self.key, pairs_) end
  if #gone > 0 then chunked('HDEL', self.key, gone) end
end
-- The money rule (admission and extension alike), on a call's views of the account hash (S, a hashview
-- of it, and cnt, its counters): takes the committed balance and spend passed in if newer, then 0 = room
-- left, 1 = balance used up by holds and pending debits, 2 = the key's ceiling reached, with what was
-- left. With cover = '1', what is left must also cover need (this request's known cost).
local function money_on(S, cnt, k, bal, bver, ceiling, field, start, spent, sver, need, cover)
  S:load({'bal', 'bver', field})
  if bal ~= '' and balance_newer(S:get('bver'), bver) then S:set('bal', bal); S:set('bver', bver) end
  if spend_newer(S:get(field), start, sver) then S:set(field, start .. '|' .. spent .. '|' .. sver) end
  local avail = tonumber(S:get('bal')) - cnt:value('total')
  if avail <= 0 or (cover == '1' and avail < tonumber(need)) then return 1, avail end
  if ceiling == '' then return 0, 0 end
  local s0, used = string.match(S:get(field), '^([^|]*)|(%d+)|')
  if s0 ~= start then used = '0' end
  local left = tonumber(ceiling) - tonumber(used) - cnt:value('a:' .. k)
  if left <= 0 or (cover == '1' and left < tonumber(need)) then return 2, left end
  return 0, 0
end
-- The money rule for one request, its newer committed values written at once.
local function money(sum, k, bal, bver, ceiling, field, start, spent, sver, need, cover)
  local S = hashview(sum)
  local m, left = money_on(S, counters(sum), k, bal, bver, ceiling, field, start, spent, sver, need, cover)
  S:flush()
  return m, left
end
-- Admission's view of a key's request bucket ({t, ts} as Redis holds them, as text): a decision leaves it at
-- tokens as of now, written back with the call's writes (dirty).
local function setBucket(b, tokens, now) b.t, b.ts, b.dirty = tostring(tokens), tostring(now), true end
-- How long an account's hold records (holds, exp, run, resv) outlive the latest hold deadline in them: an
-- hour, so a running record (a stream's output so far) of an owner that died is still there to be billed
-- when an instance takes over or sweeps the hold, even after every instance was down for that long.
local MARGIN = 3600000
-- Keeps each key at least ms longer; never shortens one (a hold placed or extended by another call, or
-- another instance with a longer upstream timeout, may need it longer).
local function keep(keys, ms)
  for _, k in ipairs(keys) do
    local left = redis.call('PTTL', k)
    if left ~= -2 and left < ms then redis.call('PEXPIRE', k, ms) end -- -2: no such key
  end
end
-- With no debit pending, the sum hash expires in ms (callers pass at least the hold records' remaining
-- time, which it counts); with one pending, never. Set, not only raised: once an account's holds are
-- gone, its commit record gives the sum hash its five idle minutes back.
local function idle_expiry(sum, pend, ms)
  if redis.call('HLEN', pend) == 0 then redis.call('PEXPIRE', sum, ms) else redis.call('PERSIST', sum) end
end
-- After a hold is placed or extended to a life of ttl: its records (holds, exp, run, and resv, its usage
-- reservations) kept MARGIN past it, and the sum hash, which counts them, as long as they.
local function keep_records(sum, holds, exp, run, pend, ttl)
  keep({holds, exp, run, qbase(sum) .. ':resv'}, ttl + MARGIN)
  idle_expiry(sum, pend, redis.call('PTTL', holds))
end
-- Settles' bookkeeping, applied to the account's keys: calls is the recorded calls in the order recorded, each
-- A = {owner, then per debit: hold debit key amount entry final covered used freed} (freed: a part's usage
-- reservation, given back and taken off the hold's record before its use is taken). For each debit: its hold
-- freed (a final) or shortened by the stretch it used (a part), the account's counters moved, the usage buckets
-- moved, and its pending record (what a takeover bills and the commit record clears) written under its call's
-- owner. All the calls queued go through one pass: the views, counters and writes below are paid once, not
-- once per call (at a steady rate each call carries one debit).
local function settle_on(sum, holds, exp, run, pend, calls)
  -- Redis's clock, read only by a debit that moves a usage bucket (most settle none).
  local now = nil
  -- The holds and debit records of every call are read ahead in one HMGET each, the counters moved once each
  -- (counters), and the writes made once at the end: the script runs alone, so each debit sees what the
  -- ones before it (in its call and the calls before) left, as if each were applied alone. A usage
  -- reservation (resv) is read only when the account has one: a settle never makes one. No function is
  -- defined per call (each would be a closure made on every call): a final debit's drop() on the pass's view
  -- is written out in the loop.
  local cnt, H, P = counters(sum), hashview(holds), hashview(pend)
  local hasResv = redis.call('EXISTS', qbase(sum) .. ':resv') == 1
  local expGone, runGone, hids, dids = {}, {}, {}, {}
  for _, A in ipairs(calls) do
    for i = 2, #A, 9 do table.insert(hids, A[i]); table.insert(dids, A[i + 1]) end
  end
  H:load(hids)
  P:load(dids)
  for _, A in ipairs(calls) do
    local owner = A[1]
    for i = 2, #A, 9 do
      local hid, did, k, amt = A[i], A[i + 1], A[i + 2], A[i + 3]
      if A[i + 5] ~= '1' and A[i + 8] ~= '' and not P:get(did) then
        now = now or qnow()
        qmove(sum, k, A[i + 8], 1, now)
        qresv(sum, hid, k, A[i + 8], -1)
        hasResv = true
      end
      -- A record under the same id (a takeover that took this owner for dead) is replaced, not added to.
      local prior = P:get(did)
      if A[i + 5] == '1' then
        -- drop() on the call's view: frees the hold (its amount, its slot, its running record).
        if hasResv then qrefund(sum, hid) end
        table.insert(expGone, hid); table.insert(runGone, hid)
        local rec = H:get(hid)
        if rec then
          local hk, hamt = string.match(rec, '^([^|]*)|(%d+)')
          cnt:add(hk, neg(hamt))
          cnt:move('n:' .. hk, '-1')
          H:del(hid)
        end
      elseif not prior then
        -- A part: the stretch of the hold it used (A[i + 6]) comes off the hold, never below zero.
        local rec = H:get(hid)
        if rec then
          local hk, hamt, howner = string.match(rec, '^([^|]*)|(%d+)|(.*)$')
          local off = math.min(tonumber(hamt), tonumber(A[i + 6]))
          if off > 0 then
            H:set(hid, hk .. '|' .. string.format('%d', tonumber(hamt) - off) .. '|' .. howner)
            cnt:add(hk, string.format('%d', -off))
          end
        end
      end
      -- After a final's refund (in drop): what was used comes off the key's buckets (once per debit).
      if not prior and A[i + 7] ~= '' then now = now or qnow(); qmove(sum, k, A[i + 7], -1, now) end
      if prior then
        local pk, pa = string.match(prior, '^([^|]*)|(%d+)|')
        cnt:add(pk, neg(pa))
        cnt:pending(pk, neg(pa))
      end
      cnt:add(k, amt)
      cnt:pending(k, amt)
      P:set(did, k .. '|' .. amt .. '|' .. owner .. '|' .. A[i + 4])
    end
  end
  cnt:flushAll()
  H:flush()
  P:flush()
  if #expGone > 0 then chunked('ZREM', exp, expGone) end
  if #runGone > 0 then chunked('HDEL', run, runGone) end
  redis.call('PERSIST', sum)
end
-- One queued call (see apply_queued) as settle_on takes it: a JSON array of its arguments with each debit's
-- entry left empty, then each entry in turn after a record separator (\\30). An entry is JSON text, which
-- holds no raw control character, so it goes as it is, not escaped again as a JSON string.
local function unpack_call(it)
  local cut = string.find(it, '\\30', 1, true)
  local A = cjson.decode(string.sub(it, 1, cut - 1))
  for i = 2, #A, 9 do
    local nxt = string.find(it, '\\30', cut + 1, true)
    A[i + 4] = string.sub(it, cut + 1, (nxt or 0) - 1)
    cut = nxt
  end
  return A
end
-- The settles recorded on replies' paths and not yet applied (the account's settle queue, <base>:setq: a list
-- of calls, each packed as unpack_call reads it, in the order recorded), applied and removed. Every script on
-- an account's keys calls it first, so each sees the account as if every settle recorded had been applied
-- when it was recorded.
local function apply_queued(sum)
  local base = qbase(sum)
  local q = base .. ':setq'
  local items = redis.call('LRANGE', q, 0, -1)
  if #items == 0 then return 0 end
  redis.call('DEL', q)
  local calls = {}
  for _, it in ipairs(items) do table.insert(calls, unpack_call(it)) end
  settle_on(sum, base .. ':holds', base .. ':holdexp', base .. ':run', base .. ':pend', calls)
  return #items
end
`;

// A turn's admissions of one account in one call, each decided in order as if it were alone.
// KEYS: sum holds exp run pend. ARGV: owner, then per request (ADMIT_ARGS): hold key amount rpm conc money bal bver ceiling field start spent sver ttl cover quotas.
// Returns one reply per request: {0, tokens, resetMs, quota dim, remaining, resetMs, ...} admitted, or a refusal (see admit()).
const ADMIT = `${LIB}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sum, holds, exp, run, pend = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner = ARGV[1]
apply_queued(sum)
for _, r in ipairs(redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, 100)) do expire(sum, holds, exp, run, r, now) end
-- The call reads each field it needs once and makes each write once, at the end: the script runs alone,
-- so a deferred write is seen by no one else, and each request is decided on the values the requests
-- before it in the call left, exactly as if each were its own call. A value is kept as the text Redis
-- would hold (a bucket's level is re-read from tostring, as it would be from Redis).
local S = hashview(sum)          -- the committed balance and spends (money_on)
local cnt = counters(sum)        -- total, a:<key>, n:<key>
local buckets = {}               -- bucket key -> {t = text or false, ts = text or false, dirty}
local bucketOrder = {}
local placed, expiring = {}, {}  -- HSET holds / ZADD exp arguments
-- Each request decided in turn. No function is defined per call (each would be a closure made on every
-- call): a request's refusal leaves the repeat-until-true block by break, with its reply set.
local out, longest = {}, 0
for a = 2, #ARGV, ${ADMIT_ARGS} do
  local reply, held = nil, 0
  repeat
    local rid, kid, hold = ARGV[a], ARGV[a + 1], ARGV[a + 2]
    local rpm, conc, withMoney = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), ARGV[a + 5]
    local ttl = tonumber(ARGV[a + 13])
    local rb = qbase(sum) .. ':rpm:' .. kid
    if withMoney == '1' then
      local m, left = money_on(S, cnt, kid, ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10], ARGV[a + 11], ARGV[a + 12], hold, ARGV[a + 14])
      if m ~= 0 then reply = {m, string.format('%d', left)}; break end
    end
    -- The key's request bucket, read once per call; a decision writes it back (dirty) with the call's writes.
    local b = buckets[rb]
    if not b then
      local v = redis.call('HMGET', rb, 't', 'ts')
      b = {t = v[1], ts = v[2]}
      buckets[rb] = b
      table.insert(bucketOrder, rb)
    end
    local rate = rpm / 60000
    local tokens = tonumber(b.t) or rpm
    local ts = tonumber(b.ts) or now
    tokens = math.min(rpm, tokens + math.max(0, now - ts) * rate)
    local mineN = cnt:value('n:' .. kid)
    if tokens < 1 then
      setBucket(b, tokens, now)
      reply = {3, 0, math.ceil((rpm - tokens) / rate), math.ceil((1 - tokens) / rate)}; break
    end
    if mineN >= conc then
      setBucket(b, tokens, now)
      reply = {4, mineN, math.floor(tokens), math.ceil((rpm - tokens) / rate)}; break
    end
    local qspec, qout = ARGV[a + 15], {}
    if qspec ~= '' then
      local qk = qbase(sum) .. ':q:' .. kid
      for d, l, n in string.gmatch(qspec, '(%a):(%d+):(%d+)') do
        local limit, need = tonumber(l), tonumber(n)
        local v = qlevel(qk, d, limit, now)
        if v < need then
          reply = {5, d, math.floor(v), math.ceil((limit - v) * 60000 / limit), math.ceil((need - v) * 60000 / limit), math.floor(tokens), math.ceil((rpm - tokens) / rate)}
          break -- the first dimension short: this for loop ends, then the request (below)
        end
      end
      if reply then setBucket(b, tokens, now); break end
      for d, l, n in string.gmatch(qspec, '(%a):(%d+):(%d+)') do
        local limit = tonumber(l)
        local v = qlevel(qk, d, limit, now) - tonumber(n)
        qset(qk, d, limit, v, now)
        table.insert(qout, d); table.insert(qout, math.floor(v)); table.insert(qout, math.ceil((limit - v) * 60000 / limit))
      end
      local resv = qbase(sum) .. ':resv'
      redis.call('HSET', resv, rid, kid .. '|' .. qspec)
    end
    tokens = tokens - 1
    setBucket(b, tokens, now)
    table.insert(placed, rid); table.insert(placed, kid .. '|' .. hold .. '|' .. owner)
    table.insert(expiring, now + ttl); table.insert(expiring, rid)
    cnt:add(kid, hold)
    cnt:move('n:' .. kid, '1')
    reply, held = {0, math.floor(tokens), math.ceil((rpm - tokens) / rate), unpack(qout)}, ttl
  until true
  table.insert(out, reply)
  if held > longest then longest = held end
end
-- The call's writes, each once.
S:flush()
cnt:flushAll()
for _, rb in ipairs(bucketOrder) do
  local b = buckets[rb]
  if b.dirty then
    redis.call('HSET', rb, 't', b.t, 'ts', b.ts)
    redis.call('PEXPIRE', rb, 120000)
  end
end
if #placed > 0 then
  redis.call('HSET', holds, unpack(placed))
  redis.call('ZADD', exp, unpack(expiring))
end
-- The hold records outlive the longest hold placed by MARGIN (each hold expires on its own in exp).
if longest > 0 then keep_records(sum, holds, exp, run, pend, longest) end
return out
`;

// KEYS: sum holds exp bucket run pend. ARGV: hold amount bal bver ceiling field start spent sver ttl rpm ('' = takes no token) cover quotas
// quotas ("dim:limit:need,..."): a session part's worst case under the key's usage limits, reserved on the hold (given back when it is dropped).
const EXTEND = `${LIB}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sum, holds, exp, rb, run, pend = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
apply_queued(sum)
local rec = redis.call('HGET', holds, ARGV[1])
if not rec then return {3} end
local k, amt, owner = string.match(rec, '^([^|]*)|(%d+)|(.*)$')
local m, left = money(sum, k, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[2], ARGV[12])
if m ~= 0 then return {m, string.format('%d', left)} end
local rpm, rate, tokens = nil, nil, nil
if ARGV[11] ~= '' then
  -- A session's billed unit counts as a request: it takes a token of the key's rpm.
  rpm = tonumber(ARGV[11])
  rate = rpm / 60000
  local b = redis.call('HMGET', rb, 't', 'ts')
  tokens = math.min(rpm, (tonumber(b[1]) or rpm) + math.max(0, now - (tonumber(b[2]) or now)) * rate)
  if tokens < 1 then
    redis.call('HSET', rb, 't', tostring(tokens), 'ts', tostring(now))
    redis.call('PEXPIRE', rb, 120000)
    return {4, math.ceil((1 - tokens) / rate)}
  end
end
local qspec = ARGV[13] or ''
if qspec ~= '' then
  local qk = qbase(sum) .. ':q:' .. k
  for d, l, n in string.gmatch(qspec, '(%a):(%d+):(%d+)') do
    local limit, need = tonumber(l), tonumber(n)
    local v = qlevel(qk, d, limit, now)
    -- Refused: no token taken, nothing reserved.
    if v < need then return {5, d, math.floor(v), math.ceil((limit - v) * 60000 / limit), math.ceil((need - v) * 60000 / limit)} end
  end
  for d, l, n in string.gmatch(qspec, '(%a):(%d+):(%d+)') do
    local limit = tonumber(l)
    qset(qk, d, limit, qlevel(qk, d, limit, now) - tonumber(n), now)
  end
  qresv(sum, ARGV[1], k, qspec, 1)
end
if rpm then
  redis.call('HSET', rb, 't', tostring(tokens - 1), 'ts', tostring(now))
  redis.call('PEXPIRE', rb, 120000)
end
redis.call('HSET', holds, ARGV[1], k .. '|' .. string.format('%d', tonumber(amt) + tonumber(ARGV[2])) .. '|' .. owner)
add(sum, k, ARGV[2])
redis.call('ZADD', exp, now + tonumber(ARGV[10]), ARGV[1])
-- A session outlives its admission: each extension keeps the records MARGIN past the hold's new
-- deadline, or a session longer than that would find its hold gone (and what it reserved under the
-- key's usage limits would not be given back when it ends).
keep_records(sum, holds, exp, run, pend, tonumber(ARGV[10]))
return {0}
`;

// KEYS: sum holds. ARGV: hold amount freed. Takes amount (at most the hold's) off an open hold; its slot stays.
// freed: a part's usage reservation, given back to the key's buckets and taken off the hold's record.
const SHRINK = `${LIB}
apply_queued(KEYS[1])
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then return 0 end
local k, amt, owner = string.match(rec, '^([^|]*)|(%d+)|(.*)$')
if (ARGV[3] or '') ~= '' then
  qmove(KEYS[1], k, ARGV[3], 1, qnow())
  qresv(KEYS[1], ARGV[1], k, ARGV[3], -1)
end
local off = math.min(tonumber(amt), tonumber(ARGV[2]))
if off <= 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], k .. '|' .. string.format('%d', tonumber(amt) - off) .. '|' .. owner)
add(KEYS[1], k, string.format('%d', -off))
return off
`;

// KEYS: sum holds exp run bucket. ARGV: hold rpm. Drops a hold no request used (a spare: gate/spares.ts) and
// gives the token its admission took back to the key's request bucket, never above the limit: the bucket is
// then as if the hold had never been placed. A hold already gone (taken over) gives nothing back.
const GIVEBACK = `${LIB}
apply_queued(KEYS[1])
if not drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]) then return 0 end
local b = redis.call('HMGET', KEYS[5], 't', 'ts')
if not b[1] then return 1 end
local rpm, now = tonumber(ARGV[2]), qnow()
local tokens = math.min(rpm, tonumber(b[1]) + math.max(0, now - (tonumber(b[2]) or now)) * rpm / 60000)
redis.call('HSET', KEYS[5], 't', tostring(math.min(rpm, tokens + 1)), 'ts', tostring(now))
return 1
`;

// KEYS: sum holds exp run. ARGV: the hold ids of one account released in one event-loop turn.
const RELEASE = `${LIB}
apply_queued(KEYS[1])
for _, r in ipairs(ARGV) do drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], r) end
return #ARGV
`;

// KEYS: sum holds. ARGV: key. The account's open holds, and its and the key's pending debits, once the
// account's settle queue is applied: {holds, pending, key's pending}.
const PEEK = `${LIB}
apply_queued(KEYS[1])
local p = redis.call('HMGET', KEYS[1], 'pending', 'p:' .. ARGV[1])
return {redis.call('HLEN', KEYS[2]), p[1] or '0', p[2] or '0'}
`;

// KEYS: sum holds pend. ARGV: owner. How many holds and pending debits of this owner the account has, its settle
// queue applied first: none, and a takeover of this owner would find nothing on the account (see unlistIdle).
const OWNS = `${LIB}
apply_queued(KEYS[1])
local n = 0
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
  if string.match(v, '^[^|]*|%d+|(.*)$') == ARGV[1] then n = n + 1 end
end
for _, v in ipairs(redis.call('HVALS', KEYS[3])) do
  if string.match(v, '^[^|]*|%d+|([^|]*)|') == ARGV[1] then n = n + 1 end
end
return n
`;

// KEYS: sum pend holds. ARGV: n, n debit ids, bal, bver, m, m x (field start spent version)
const COMMITTED = `${LIB}
local sum, pend, holds = KEYS[1], KEYS[2], KEYS[3]
local n = tonumber(ARGV[1])
-- The account's recorded settles first: a debit being committed may still be only in the queue.
apply_queued(sum)
-- The records are read ahead (hashview) and each counter moved once (counters); an id given twice
-- finds its record gone the second time, so it counts once.
local cnt, P, ids = counters(sum), hashview(pend), {}
for i = 2, n + 1 do table.insert(ids, ARGV[i]) end
P:load(ids)
for _, id in ipairs(ids) do
  local rec = P:get(id)
  if rec then
    local k, amt = string.match(rec, '^([^|]*)|(%d+)|')
    cnt:add(k, neg(amt))
    cnt:pending(k, neg(amt))
    P:del(id)
  end
end
cnt:flushAll()
P:flush()
newer_balance(sum, ARGV[n + 2], ARGV[n + 3])
local m = tonumber(ARGV[n + 4])
for j = 0, m - 1 do
  local o = n + 5 + j * 4
  newer_spend(sum, ARGV[o], ARGV[o + 1], ARGV[o + 2], ARGV[o + 3])
end
-- With no debit pending, the sum hash expires after five minutes idle, and never before the hold records
-- it counts (kept MARGIN past the latest hold deadline, which may be longer).
idle_expiry(sum, pend, math.max(300000, redis.call('PTTL', holds)))
return n
`;

// KEYS: sum holds exp run pend. ARGV: dead owner, new owner.
// The dead owner's holds are freed (a running record becomes a pending debit) and its pending debits
// become the new owner's; returns them as flat (id, key, amount, entry) quadruples.
const TAKEOVER = `${LIB}
local sum, holds, exp, run, pend = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local dead, me = ARGV[1], ARGV[2]
-- The account's recorded settles first, the dead owner's among them: each becomes a pending record, found below.
apply_queued(sum)
local all = redis.call('HGETALL', holds)
for i = 1, #all, 2 do
  local r = all[i]
  local k, _, owner = string.match(all[i + 1], '^([^|]*)|(%d+)|(.*)$')
  if owner == dead then
    local progress = redis.call('HGET', run, r)
    drop(sum, holds, exp, run, r)
    if progress then
      local amt, entry = string.match(progress, '^(%d+)|(.*)$')
      add(sum, k, amt)
      pending(sum, k, amt)
      redis.call('HSET', pend, r, k .. '|' .. amt .. '|' .. dead .. '|' .. entry)
    end
  end
end
local out = {}
local p = redis.call('HGETALL', pend)
for i = 1, #p, 2 do
  local k, amt, owner, entry = string.match(p[i + 1], '^([^|]*)|(%d+)|([^|]*)|(.*)$')
  if owner == dead then
    redis.call('HSET', pend, p[i], k .. '|' .. amt .. '|' .. me .. '|' .. entry)
    table.insert(out, p[i]); table.insert(out, k); table.insert(out, amt); table.insert(out, entry)
  end
end
if #p > 0 then redis.call('PERSIST', sum) end
return out
`;

// KEYS: instances. ARGV: owner. Records a heartbeat in Redis time.
const BEAT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
return now
`;

// KEYS: instances. ARGV: silence (ms). Owners not heard from for that long.
const SILENT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, 16)
`;

/**
 * The scripts that share LIB, also loaded once as a Redis Functions library (Redis 7 and later). An
 * EVALSHA runs the whole script text on every call, so it defines LIB's functions and closures anew each
 * time; an FCALL runs only the body, LIB having been defined once when the library was loaded. Same code,
 * same atomicity; on this project's 2-core machine 16% less redis-server CPU per request, one request per call
 * (bench/redis-functions.mjs, docs/benchmarks.md). The library's name and its functions' carry a hash of
 * the code, so instances of two versions (a rolling upgrade) each call their own.
 */
export const SCRIPTS = {
  admit: { lua: ADMIT, keys: 5 },
  release: { lua: RELEASE, keys: 4 },
  giveback: { lua: GIVEBACK, keys: 5 },
  extend: { lua: EXTEND, keys: 6 },
  shrink: { lua: SHRINK, keys: 2 },
  peek: { lua: PEEK, keys: 2 },
  owns: { lua: OWNS, keys: 3 },
  committed: { lua: COMMITTED, keys: 3 },
  takeover: { lua: TAKEOVER, keys: 5 },
} as const;
type ScriptName = keyof typeof SCRIPTS;
const SCRIPT_NAMES = Object.keys(SCRIPTS) as ScriptName[];
/** The ioredis command (EVALSHA, loading the text on NOSCRIPT) that runs a script. */
const evalName = (n: ScriptName): string => `tg_eval_${n}`;
/**
 * The Functions library of SCRIPTS: named `<library>_<hash>`, each script registered as `<fn>_<script>_<hash>`.
 * The limiter's is `tollgate_…`/`tg_…`; a bench loads its own copy under other names.
 */
export function functionsLibrary(hash: string, library = 'tollgate', fn = 'tg'): { library: string; libraryName: string; name(n: ScriptName): string } {
  const name = (n: ScriptName): string => `${fn}_${n}_${hash}`;
  const libraryName = `${library}_${hash}`;
  return {
    libraryName, name,
    library: `#!lua name=${libraryName}\n${LIB}\n` + SCRIPT_NAMES
      .map((n) => `redis.register_function('${name(n)}', function(KEYS, ARGV)\n${SCRIPTS[n].lua.slice(LIB.length)}\nend)`).join('\n'),
  };
}
const CODE_HASH = createHash('sha1').update(SCRIPT_NAMES.map((n) => SCRIPTS[n].lua).join('\n')).digest('hex').slice(0, 12);
const LIBRARY = functionsLibrary(CODE_HASH);
/** Each script is LIB followed by its body: the library defines LIB once and registers each body as a function. */
export const FUNCTIONS_LIBRARY = LIBRARY.library;

type Scripted = RedisClient & {
  tgBeat(...args: string[]): Promise<number>;
  tgSilent(...args: string[]): Promise<string[]>;
} & { [k: string]: unknown };

/**
 * Loads `library` on every master the Cluster client knows, each over a short connection of its own (the
 * node's address and credentials). Fails if it knows none yet or any load fails: FCALL is used only once
 * every master has the library (a master added later answers "Function not found", and the library is loaded again).
 */
async function loadOnMasters(cluster: Cluster, library: string): Promise<void> {
  const masters = cluster.nodes('master');
  if (masters.length === 0) throw new Error('no Cluster master known yet');
  await Promise.all(masters.map(async (node) => {
    const { host, port, username, password, tls } = node.options;
    const one = new Redis({ host, port, username, password, tls, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
    one.on('error', () => undefined); // the load's own failure is what reports it
    try {
      await one.connect();
      await one.call('FUNCTION', 'LOAD', 'REPLACE', library);
    } finally {
      one.disconnect();
    }
  }));
}

interface Batch<T> { items: T[]; done: Promise<void>; settle(err?: unknown): void }

/** One settle as the limiter queues it: hold id, debit, final, what it covered, used and freed (quotaArg text). */
export type QueuedSettle = [string, PendingDebit, boolean, bigint, string, string];

/**
 * One call's settles as an entry of the account's settle queue, packed as the scripts' unpack_call reads it: the
 * arguments settle_on takes as a JSON array, each debit's entry left empty, then the entries (JSON text already,
 * with no raw control character) each after a record separator, so they are not escaped a second time.
 */
export function packSettles(owner: string, settles: readonly QueuedSettle[]): string {
  const args: string[] = [owner];
  let entries = '';
  for (const [holdId, d, final, covered, used, freed] of settles) {
    args.push(holdId, d.id, d.keyId, d.amount.toString(), '', final ? '1' : '0', covered.toString(), used, freed);
    entries += `\x1e${d.entry}`;
  }
  return JSON.stringify(args) + entries;
}

/**
 * The most items one script call carries: a turn's batch for one account goes in calls of at most this
 * many. The arguments are spread onto the stack: 9,900 streams ending in one turn (8 arguments a settle)
 * overflowed it ("Maximum call stack size exceeded"), and each debit fell back to a direct commit.
 */
const MAX_PER_CALL = 500;

/** Runs `call` on the items in slices of MAX_PER_CALL (sent in order on the one connection); resolves when all have. */
function inCalls<T>(items: readonly T[], call: (part: readonly T[]) => Promise<unknown>): Promise<void> {
  const calls: Promise<unknown>[] = [];
  for (let i = 0; i < items.length; i += MAX_PER_CALL) calls.push(call(items.slice(i, i + MAX_PER_CALL)));
  return Promise.all(calls).then(() => undefined);
}

/** A heartbeat every second; an owner silent for 5 s is dead and its holds and debits are taken over. */
export const HEARTBEAT_MS = 1000;
export const DEAD_AFTER_MS = 5000;
/** An account this instance has not admitted or settled on for this long leaves its account list, if nothing of its is there (unlistIdle). */
export const UNLIST_IDLE_MS = 10 * 60_000;
/** How often the list is looked over for such accounts, and how many are checked at most each time. */
const UNLIST_EVERY_MS = 60_000;
const UNLIST_BATCH = 256;

/** The account hash's field of a key's committed spend in its day or month ("start|spent|version"). */
function spendField(period: 'day' | 'month', keyId: string): string {
  return `${period === 'day' ? 'sd' : 'sm'}:${keyId}`;
}

/** One request's reply from the admission script (ADMIT). */
function admitOutcome(r: (number | string)[], i: AdmitInput): AdmitOutcome {
  switch (r[0]) {
    case 0: {
      if (r.length <= 3) return { ok: true, remaining: Number(r[1]), resetMs: Number(r[2]) };
      const quotas: QuotaState[] = [];
      for (let j = 3; j + 2 < r.length; j += 3) {
        const dim = r[j] as QuotaDim;
        quotas.push({ dim, limit: i.quotas!.find((q) => q.dim === dim)!.limit, remaining: Math.max(0, Number(r[j + 1])), resetMs: Number(r[j + 2]) });
      }
      return { ok: true, remaining: Number(r[1]), resetMs: Number(r[2]), quotas };
    }
    case 5: {
      const q = i.quotas!.find((x) => x.dim === r[1])!;
      return { ok: false, reason: 'quota_exceeded', quota: { dim: q.dim, limit: q.limit, remaining: Math.max(0, Number(r[2])), resetMs: Number(r[3]) },
        need: q.need, retryMs: Number(r[4]), remaining: Number(r[5]), resetMs: Number(r[6]) };
    }
    case 1: return { ok: false, reason: 'insufficient_balance', available: BigInt(r[1]!) };
    case 2: return { ok: false, reason: 'key_spend_limit_reached', available: BigInt(r[1]!) };
    case 3: return { ok: false, reason: 'rate_limit_exceeded', remaining: 0, resetMs: Number(r[2]), retryMs: Number(r[3]) };
    default: return { ok: false, reason: 'concurrency_limit_exceeded', inFlight: Number(r[1]), remaining: Number(r[2]), resetMs: Number(r[3]) };
  }
}

export class RedisLimiter implements Limiter {
  readonly kind = 'redis' as const;
  /** This process's name in hold and debit records. */
  readonly owner = `i${randomBytes(6).toString('hex')}`;
  private readonly redis: Scripted;
  private admits = new Map<string, { i: AdmitInput; resolve: (o: AdmitOutcome) => void; reject: (e: unknown) => void }[]>();
  private readonly flushAdmitsFn = (): void => this.flushAdmits();
  /** The batches that have something queued this turn, in the order they were first queued. */
  private due: (() => void)[] = [];
  private releases = new Map<string, Batch<string>>();
  private settles = new Map<string, Batch<QueuedSettle>>();
  private commits = new Map<string, Batch<{ ids: string[]; state: CommittedState }>>();
  /** Accounts already listed under this owner (so a dead owner's accounts can be found), with when each was last used here. */
  private readonly listed = new Map<string, number>();
  /** Accounts being taken off the list (unlistIdle): an admission on one waits until that is done, then lists it again. */
  private readonly unlisting = new Map<string, Promise<void>>();
  private lastUnlist = Date.now();
  private beat: NodeJS.Timeout | undefined;
  /** When the connection last became ready: after an outage every owner's heartbeat is stale, so takeovers wait. */
  private readyAt = Date.now();
  /** The Functions library is loaded (on the server, or on every master of a Cluster): calls go by FCALL, else by EVALSHA. */
  private functions = false;
  /** The server has no Functions (Redis before 7) or the ACL denies them: EVALSHA only, never asked again. */
  private noFunctions = false;
  private loading: Promise<void> | null = null;

  constructor(url: string, private readonly prefix: string) {
    // No offline queue and no resend: while Redis is unreachable a command fails at once (admission
    // answers 503 in a moment), and a command reported failed is never sent again behind our back.
    // One that ran before the connection died, its answer lost, is undone by the caller (a release,
    // or clearing a pending debit that was committed another way).
    // The URL may name one server, a Cluster (redis+cluster://) or a Sentinel group (redis+sentinel://): redis-connect.ts.
    const r = openRedis(url, { maxRetriesPerRequest: 0, enableOfflineQueue: false, autoResendUnfulfilledCommands: false,
      enableAutoPipelining: true, lazyConnect: false });
    r.on('error', () => undefined); // reported where a command fails; the client reconnects by itself
    // A connection lost (one server's, or any node's of a Cluster): what this instance admitted ahead
    // (spare holds) may no longer be there, and admission must fail closed meanwhile.
    if (r instanceof Cluster) {
      r.on('+node', (node: Redis) => node.on('close', () => this.lost()));
      r.on('node error', () => this.lost());
    } else r.on('close', () => this.lost());
    r.on('ready', () => {
      this.readyAt = Date.now();
      // The server may have come back without this owner's account list (a restart with nothing on disk,
      // a replica promoted before it had the last SADD): each account is listed again on its next use, or
      // a debit recorded since would not be found by a takeover if this instance died.
      this.listed.clear();
      (r as Scripted).tgBeat(this.instancesKey(), this.owner).catch(() => undefined);
      void this.loadFunctions();
    });
    for (const n of SCRIPT_NAMES) r.defineCommand(evalName(n), { numberOfKeys: SCRIPTS[n].keys, lua: SCRIPTS[n].lua });
    r.defineCommand('tgBeat', { numberOfKeys: 1, lua: BEAT });
    r.defineCommand('tgSilent', { numberOfKeys: 1, lua: SILENT });
    this.redis = r as Scripted;
  }

  /**
   * Loads the Functions library on the server (one server, or the master a Sentinel group names), or on
   * every master of a Cluster; a replica gets it by replication, so a failover keeps it. Until it is loaded
   * everywhere, or where it cannot be (Redis before 7), the scripts go by EVALSHA: the same code either way.
   * A Cluster's masters are each loaded over a connection of its own (loadOnMasters), never the client's:
   * connecting one of the client's nodes early, with no offline queue, failed commands routed to it meanwhile.
   */
  private loadFunctions(): Promise<void> {
    if (this.noFunctions) return Promise.resolve();
    const server = this.redis;
    this.loading ??= (async () => {
      try {
        if (server instanceof Cluster) await loadOnMasters(server, FUNCTIONS_LIBRARY);
        else await server.call('FUNCTION', 'LOAD', 'REPLACE', FUNCTIONS_LIBRARY);
        this.functions = true;
      } catch (e) {
        this.functions = false;
        // No Functions (Redis before 7), or a user the ACL denies FUNCTION: EVALSHA from now on.
        if (/unknown command|NOPERM/i.test(String((e as Error)?.message))) this.noFunctions = true;
      } finally {
        this.loading = null;
      }
    })();
    return this.loading;
  }

  /**
   * Runs a script: FCALL while the library is loaded, else EVALSHA. A server that answers that the
   * function is not there (restarted with nothing on disk, or a replica promoted before it had the
   * library) did not run it, so the call goes again by EVALSHA at once and the library is loaded again.
   */
  private script<T>(name: ScriptName, ...args: string[]): Promise<T> {
    const byEval = (): Promise<T> => (this.redis[evalName(name)] as (...a: string[]) => Promise<T>).apply(this.redis, args);
    if (!this.functions) return byEval().catch((e: unknown) => this.failed(e));
    return (this.redis.fcall(LIBRARY.name(name), SCRIPTS[name].keys, ...args) as Promise<T>).catch((e: unknown) => {
      if (!/function not found/i.test(String((e as Error)?.message))) return this.failed(e);
      this.functions = false;
      void this.loadFunctions();
      return byEval().catch((e2: unknown) => this.failed(e2));
    });
  }

  private readonly onLost: (() => void)[] = [];

  onTrouble(f: () => void): void { this.onLost.push(f); }

  private lost(): void { for (const f of this.onLost) f(); }

  /** A script call failed (unreachable, or a master gone): told as a connection lost, then rethrown. */
  private failed(e: unknown): never {
    this.lost();
    throw e;
  }

  /** A PING (failing at once while disconnected: there is no offline queue). */
  async ping(): Promise<void> {
    await this.redis.ping();
  }

  async ready(): Promise<void> {
    if (this.redis.status !== 'ready') {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('Redis did not become ready within 10 s')), 10_000);
        this.redis.once('ready', () => { clearTimeout(t); resolve(); });
      });
    }
    await this.redis.ping();
    await this.redis.tgBeat(this.instancesKey(), this.owner);
    // The 'ready' event has loaded the library already, or is loading it (then this waits for that load).
    if (!this.functions) await this.loadFunctions();
    const tick = () => {
      this.redis.tgBeat(this.instancesKey(), this.owner).catch(() => undefined);
      if (!this.functions) void this.loadFunctions();
      if (Date.now() - this.lastUnlist >= UNLIST_EVERY_MS) void this.unlistIdle();
      this.beat = setTimeout(tick, HEARTBEAT_MS);
      this.beat.unref();
    };
    this.beat = setTimeout(tick, HEARTBEAT_MS);
    this.beat.unref();
  }

  /**
   * Where this version lists itself: apart from the registry of the versions before the settle queue
   * (`{registry}:`, which they read alone), so that their takeover, which does not apply the queue, never
   * takes over an instance of this one (its queued debits would be left pending under a name no takeover
   * looks for again). This version reads theirs as well (claimOrphans), and its takeover applies the queue.
   */
  private get registry(): string { return `${this.prefix}{registry}:q:`; }
  /** A registry's instance list (this version's by default). */
  private instancesKey(reg = this.registry): string { return `${reg}instances`; }
  /** An owner's account list in a registry (this version's by default). */
  private accountsOf(owner: string, reg = this.registry): string { return `${reg}inst:${owner}:accts`; }
  /** The key's request bucket, in its account's slot (its scripts touch both). */
  private rpmKey(accountId: string, keyId: string): string { return `${this.prefix}{${accountId}}:rpm:${keyId}`; }

  /** The account's settle queue (apply_queued in the scripts derives the same name from the sum key). */
  private setqKey(accountId: string): string { return `${this.prefix}{${accountId}}:setq`; }

  private keys(accountId: string): [string, string, string, string, string] {
    const p = `${this.prefix}{${accountId}}`;
    return [`${p}:holdsum`, `${p}:holds`, `${p}:holdexp`, `${p}:run`, `${p}:pend`];
  }

  /** Lists the account under this owner before anything of this owner's is recorded in it (same connection, so in order). */
  private list(accountId: string): void {
    const known = this.listed.has(accountId);
    this.listed.set(accountId, Date.now());
    if (known) return;
    this.redis.sadd(this.accountsOf(this.owner), accountId).catch(() => this.listed.delete(accountId));
  }

  /**
   * Takes accounts this instance has not used for `idleMs` off its account list, so that the list (and the
   * takeover that reads it if this instance dies) stays as long as the accounts it is serving, not every
   * account it ever served. An account leaves only when the `owns` script finds nothing of this owner's there
   * (no hold, no pending debit, its settle queue applied first): a takeover would find nothing in it either.
   * Meanwhile its admissions wait (`unlisting`), and list it again once the removal is answered, so the removal
   * can never land after a new hold's listing. Anything else this owner records on an account follows a hold
   * the check would have seen. Returns how many left the list.
   */
  async unlistIdle(idleMs = UNLIST_IDLE_MS): Promise<number> {
    this.lastUnlist = Date.now();
    const before = Date.now() - idleMs;
    const idle: string[] = [];
    for (const [accountId, at] of this.listed) {
      // An admission queued for this turn's call is not yet in Redis for the check to see: that account waits.
      if (at <= before && !this.unlisting.has(accountId) && !this.admits.has(accountId)) idle.push(accountId);
      if (idle.length >= UNLIST_BATCH) break;
    }
    const left = await Promise.all(idle.map((accountId) => {
      this.listed.delete(accountId);
      const done = this.unlist(accountId).finally(() => this.unlisting.delete(accountId));
      this.unlisting.set(accountId, done.then(() => undefined));
      return done;
    }));
    return left.filter(Boolean).length;
  }

  /** One account of unlistIdle: off the list when nothing of this owner's is there; true when it left. */
  private async unlist(accountId: string): Promise<boolean> {
    try {
      const [sum, holds, , , pend] = this.keys(accountId);
      if (await this.script<number>('owns', sum, holds, pend, this.owner) === 0) {
        await this.redis.srem(this.accountsOf(this.owner), accountId);
        return true;
      }
    } catch { /* Redis in trouble: the account stays listed */ }
    if (!this.listed.has(accountId)) this.listed.set(accountId, Date.now());
    return false;
  }

  /**
   * Queues the admission; the turn's admissions of each account go as one script call (after the
   * turn's I/O, in `setImmediate`), each decided in order as if it were alone. The call's fixed cost
   * (the script's start, Redis's clock, expired holds swept, the records' expiry) is paid once a turn.
   */
  admit(i: AdmitInput): Promise<AdmitOutcome> {
    const unlisting = this.unlisting.get(i.accountId);
    if (unlisting) return unlisting.then(() => this.admit(i));
    this.list(i.accountId);
    return new Promise<AdmitOutcome>((resolve, reject) => {
      let q = this.admits.get(i.accountId);
      if (!q) {
        if (this.admits.size === 0) this.afterTurn(this.flushAdmitsFn);
        q = [];
        this.admits.set(i.accountId, q);
      }
      q.push({ i, resolve, reject });
    });
  }

  private flushAdmits(): void {
    const due = this.admits;
    this.admits = new Map();
    for (const [accountId, queued] of due) {
      const [sum, holds, exp, run, pend] = this.keys(accountId);
      void inCalls(queued, (part) => {
        const args: string[] = [this.owner];
        for (const { i } of part) {
          args.push(i.holdId, i.keyId, i.hold.toString(), String(i.rpm), String(i.concurrency), i.money ? '1' : '0',
            i.balance.amount.toString(), i.balance.version.toString(), i.ceiling === null ? '' : i.ceiling.toString(),
            spendField(i.spent.period, i.keyId), i.spent.start, i.spent.amount.toString(), i.spent.version.toString(),
            String(i.ttlMs), i.cover ? '1' : '', quotaArg(i.quotas));
        }
        // Each request's answer or the call's error reaches its own caller: the slice's promise never rejects.
        return this.script<(number | string)[][]>('admit', sum, holds, exp, run, pend, ...args).then(
          (replies) => { for (let j = 0; j < part.length; j++) part[j]!.resolve(admitOutcome(replies[j]!, part[j]!.i)); },
          (e: unknown) => { for (const p of part) p.reject(e); });
      });
    }
  }

  async extend(i: ExtendInput): Promise<ExtendOutcome> {
    const [sum, holds, exp, run, pend] = this.keys(i.accountId);
    const field = spendField(i.spent.period, i.keyId);
    const r = await this.script<(number | string)[]>('extend', sum, holds, exp, this.rpmKey(i.accountId, i.keyId), run, pend, i.holdId, i.amount.toString(), i.balance.amount.toString(), i.balance.version.toString(),
      i.ceiling === null ? '' : i.ceiling.toString(), field, i.spent.start, i.spent.amount.toString(), i.spent.version.toString(), String(i.ttlMs),
      i.rpm === undefined ? '' : String(i.rpm), i.cover ? '1' : '', quotaArg(i.quotas));
    switch (r[0]) {
      case 0: return { ok: true };
      case 5: {
        const q = i.quotas!.find((x) => x.dim === r[1])!;
        return { ok: false, reason: 'quota_exceeded', quota: { dim: q.dim, limit: q.limit, remaining: Math.max(0, Number(r[2])), resetMs: Number(r[3]) }, need: q.need, retryMs: Number(r[4]) };
      }
      case 1: return { ok: false, reason: 'insufficient_balance', available: BigInt(r[1]!) };
      case 2: return { ok: false, reason: 'key_spend_limit_reached', available: BigInt(r[1]!) };
      case 4: return { ok: false, reason: 'rate_limit_exceeded', retryMs: Number(r[1]) };
      default: return { ok: false, reason: 'missing' };
    }
  }

  async shrink(accountId: string, holdId: string, amount: bigint, freed?: QuotaUse): Promise<void> {
    if (amount <= 0n && !freed?.length) return;
    const [sum, holds] = this.keys(accountId);
    await this.script<number>('shrink', sum, holds, holdId, (amount < 0n ? 0n : amount).toString(), quotaArg(freed));
  }

  /**
   * Queues the hold's release; the turn's releases of each account go as one script call (after the
   * turn's I/O, in `setImmediate`): one call per request cost Redis and ioredis CPU for nothing.
   */
  release(accountId: string, holdId: string): Promise<void> {
    return this.queue(this.releases, accountId, holdId, () => this.flushReleases());
  }

  async giveBack(accountId: string, keyId: string, holdId: string, rpm: number): Promise<void> {
    const [sum, holds, exp, run] = this.keys(accountId);
    await this.script<number>('giveback', sum, holds, exp, run, this.rpmKey(accountId, keyId), holdId, String(rpm));
  }

  private flushReleases(): void {
    const due = this.releases;
    this.releases = new Map();
    for (const [accountId, b] of due) {
      const [sum, holds, exp, run] = this.keys(accountId);
      inCalls(b.items, (part) => this.script<number>('release', sum, holds, exp, run, ...part))
        .then(() => b.settle(), (e: unknown) => b.settle(e ?? new Error('release failed')));
    }
  }

  /**
   * Records the settle; resolves once Redis has it. The turn's settles of one account go as one RPUSH onto the
   * account's settle queue (`setq`): a plain command, no script on the reply's path. That is what a kill -9
   * needs: a takeover applies the queue before it looks for the dead owner's debits. The bookkeeping (the hold
   * freed, the counters and usage buckets moved, the pending record written: settle_on) runs in the next script
   * any instance runs on the account, each of which applies the queue first (apply_queued), so none sees the
   * account without it. This instance always sends one: the commit record of each debit (Committer.clear).
   */
  settle(holdId: string, d: PendingDebit, final: boolean, covered = d.amount, used?: QuotaUse, freed?: QuotaUse): Promise<void> {
    this.list(d.accountId);
    return this.queue(this.settles, d.accountId, [holdId, d, final, covered, quotaArg(used), quotaArg(freed)], () => this.flushSettles());
  }

  private flushSettles(): void {
    const due = this.settles;
    this.settles = new Map();
    for (const [accountId, b] of due) {
      const setq = this.setqKey(accountId);
      inCalls(b.items, (part) => this.redis.rpush(setq, packSettles(this.owner, part)).catch((e: unknown) => this.failed(e))).then(() => b.settle(), (e: unknown) => b.settle(e ?? new Error('settle failed')));
    }
  }

  progress(holdId: string, d: PendingDebit): Promise<void> {
    const run = this.keys(d.accountId)[3];
    return this.redis.hset(run, holdId, `${d.amount}|${d.entry}`).then(() => undefined, () => undefined);
  }

  committed(accountId: string, ids: string[], state: CommittedState): Promise<void> {
    return this.queue(this.commits, accountId, { ids, state }, () => this.flushCommits());
  }

  private flushCommits(): void {
    const due = this.commits;
    this.commits = new Map();
    for (const [accountId, b] of due) {
      const [sum, holds, , , pend] = this.keys(accountId);
      const ids = b.items.flatMap((x) => x.ids);
      // The newest committed balance and spends among the batch's commits.
      let bal: CommittedState['balance'] = null;
      const spends = new Map<string, CommittedState['spends'][number]>();
      for (const { state } of b.items) {
        if (state.balance && (!bal || state.balance.version > bal.version)) bal = state.balance;
        for (const s of state.spends) {
          const f = spendField(s.period, s.keyId);
          const cur = spends.get(f);
          if (!cur || s.start > cur.start || (s.start === cur.start && s.version > cur.version)) spends.set(f, s);
        }
      }
      const args = [String(ids.length), ...ids, bal ? bal.amount.toString() : '', bal ? bal.version.toString() : '', String(spends.size)];
      for (const [f, s] of spends) args.push(f, s.start, s.spent.toString(), s.version.toString());
      this.script<number>('committed', sum, pend, holds, ...args).then(() => b.settle(), (e: unknown) => b.settle(e ?? new Error('commit record failed')));
    }
  }

  /**
   * Runs `flush` after the turn's I/O (in `setImmediate`), with every other batch queued this turn, in the order
   * they were queued, and then writes what they sent at once: one socket write for all of them, in this loop
   * iteration rather than the next (redis-connect.ts, `uncorkNow`). One request at a time, the settle's durable
   * record went out one event-loop iteration after its reply was read (docs/benchmarks.md, "The turn's Redis
   * calls written in the turn").
   */
  private afterTurn(flush: () => void): void {
    if (this.due.length === 0) setImmediate(this.runDue);
    this.due.push(flush);
  }

  private readonly runDue = (): void => {
    const due = this.due;
    this.due = [];
    for (const f of due) f();
    (this.redis as Corked).uncorkNow?.();
  };

  private queue<T>(map: Map<string, Batch<T>>, accountId: string, item: T, flush: () => void): Promise<void> {
    let batch = map.get(accountId);
    if (!batch) {
      if (map.size === 0) this.afterTurn(flush);
      let settle!: (err?: unknown) => void;
      const done = new Promise<void>((resolve, reject) => { settle = (err) => (err === undefined ? resolve() : reject(err)); });
      batch = { items: [], done, settle };
      map.set(accountId, batch);
    }
    batch.items.push(item);
    return batch.done;
  }

  /**
   * Takes over every owner silent for DEAD_AFTER_MS: one live instance wins each (a lease), frees the
   * dead one's holds, turns its running records into debits, and re-owns its pending debits (listing
   * their accounts under itself first, so its own death would hand them on again).
   */
  async claimOrphans(): Promise<PendingDebit[]> {
    const out: PendingDebit[] = [];
    // Just back from an outage: nobody could beat meanwhile, so silence proves nothing yet.
    if (Date.now() - this.readyAt < DEAD_AFTER_MS + HEARTBEAT_MS) return out;
    // This version's registry, then the earlier versions' (before the settle queue: `{registry}:`; before the
    // hash tags: `<prefix>instances`…), where an instance of an older version that died during a rolling upgrade
    // is listed; its holds and debits are under the same keys.
    for (const reg of [this.registry, `${this.prefix}{registry}:`, this.prefix]) {
      const dead = (await this.redis.tgSilent(this.instancesKey(reg), String(DEAD_AFTER_MS))).filter((o) => o !== this.owner);
      for (const d of dead) {
        const lease = `${reg}recover:${d}`;
        if ((await this.redis.set(lease, this.owner, 'PX', 30_000, 'NX')) !== 'OK') continue;
        const accounts = await this.redis.smembers(this.accountsOf(d, reg));
        for (const accountId of accounts) {
          // An account being taken off this owner's list is listed again after that, not before (unlistIdle).
          await this.unlisting.get(accountId);
          if (!this.listed.has(accountId)) { await this.redis.sadd(this.accountsOf(this.owner), accountId); this.listed.set(accountId, Date.now()); }
          const flat = await this.script<string[]>('takeover', ...this.keys(accountId), d, this.owner);
          for (let i = 0; i < flat.length; i += 4) {
            out.push({ id: flat[i]!, accountId, keyId: flat[i + 1]!, amount: BigInt(flat[i + 2]!), entry: flat[i + 3]! });
          }
        }
        // The old registry's keys are in three slots: one command each (the lease last, so a failure retries).
        if (reg === this.prefix) {
          await this.redis.zrem(this.instancesKey(reg), d);
          await this.redis.del(this.accountsOf(d, reg));
          await this.redis.del(lease);
        } else await this.redis.multi().zrem(this.instancesKey(reg), d).del(this.accountsOf(d, reg)).del(lease).exec();
      }
    }
    return out;
  }

  /** The account's open holds and pending debits, its settle queue applied first (peek). */
  private async peek(accountId: string, keyId = ''): Promise<[number, string, string]> {
    const [sum, holds] = this.keys(accountId);
    return this.script<[number, string, string]>('peek', sum, holds, keyId);
  }

  async pendingOf(accountId: string, keyId: string): Promise<{ account: bigint; key: bigint }> {
    const [, a, k] = await this.peek(accountId, keyId);
    return { account: BigInt(a), key: BigInt(k) };
  }

  async openHolds(accountId: string): Promise<number> {
    return (await this.peek(accountId))[0];
  }

  /** Stops the heartbeat; with nothing of this owner left pending, it also leaves the instance list. */
  async close(nothingPending = true): Promise<void> {
    if (this.beat) clearTimeout(this.beat);
    if (nothingPending) {
      await this.redis.multi().zrem(this.instancesKey(), this.owner).del(this.accountsOf(this.owner)).exec().catch(() => undefined);
    }
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
