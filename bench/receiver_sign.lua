-- wrk script for bench/receiver.py: cycle through pre-signed webhook requests.
--
-- wrk's LuaJIT has no HMAC-SHA512, so bench/receiver.py signs a pool of ~1 KB events in Python
-- (fresh Timestamps, well inside the receiver's tolerance) and writes it as a Lua file that
-- returns { {path=…, headers={…}, body=…}, … }. Each wrk thread formats the pool once in init()
-- and then sends request after request from it, starting at a different offset per thread.
--
-- usage: wrk -s bench/receiver_sign.lua URL -- POOL.lua
-- done() prints one JSON line (prefixed "WRK_JSON ") that bench/receiver.py parses.

local requests = {}
local count = 0
local index = 0
local thread_number = 0

function setup(thread)
   thread:set("id", thread_number)
   thread_number = thread_number + 1
end

function init(args)
   local pool = dofile(args[1])
   for i, item in ipairs(pool) do
      requests[i] = wrk.format("POST", item.path, item.headers, item.body)
   end
   count = #requests
   index = ((id or 0) * 7919) % count
end

function request()
   index = index + 1
   if index > count then
      index = 1
   end
   return requests[index]
end

function done(summary, latency, _requests)
   local e = summary.errors
   io.write(string.format(
      'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,' ..
      '"write_errors":%d,"status_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
      '"max_us":%d}\n',
      summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
      e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
