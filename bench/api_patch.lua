-- wrk script for bench/api.py: profile PATCHes (merge patches) that each change something.
--
-- usage: wrk -s bench/api_patch.lua URL -- TOKEN PROFILES_PATH ID,ID,...
-- Each request renames the customer and replaces the tags of one profile, cycling through the
-- ids (threads start at different offsets), so every PATCH yields profile.updated,
-- profile.updatedfull, standardfield.firstname.updated, tag.added and tag.deleted.
-- done() prints one JSON line (prefixed "WRK_JSON ") that bench/api.py parses.

local ids = {}
local path = ""
local headers = {}
local counter = 0
local thread_number = 0

function setup(thread)
   thread:set("id", thread_number)
   thread_number = thread_number + 1
end

function init(args)
   headers["Authorization"] = "Bearer " .. args[1]
   headers["Content-Type"] = "application/merge-patch+json"
   path = args[2]
   for value in string.gmatch(args[3], "[^,]+") do
      ids[#ids + 1] = value
   end
   counter = (id or 0) * 7919
end

function request()
   counter = counter + 1
   local profile = ids[(counter % #ids) + 1]
   local body = string.format(
      '{"CustomerName":{"FirstName":"N%d-%d"},"Tags":["t%d-%d"]}',
      id or 0, counter, id or 0, counter)
   return wrk.format("PATCH", path .. "/" .. profile, headers, body)
end

function done(summary, latency, _requests)
   local e = summary.errors
   io.write(string.format(
      'WRK_JSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,' ..
      '"write_errors":%d,"status_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
      '"max_us":%d}\n',
      summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
