-- wrk script: durable task submissions, POST /api/v1/tasks with a JSON body.
--   wrk -t2 -c64 -d10s --latency -s bench/rest_submit.lua http://127.0.0.1:8080
-- PRIORITY=high|low|mixed (default mixed: alternate per request; with HIGH_FRACTION=F, a share F
-- of the requests is high, evenly interleaved, e.g. 0.7 for the default 70/30 quota);
-- COMMAND (default "true"). TOKEN: sent as "Authorization: Bearer <TOKEN>".
-- TOTAL=N with THREADS=<wrk -t>: exactly N submissions in all (split over the threads); each
-- thread stops once its share is answered (requests a connection sends after that are
-- GET /healthz, which changes nothing). done() prints "submissions: N sent, A accepted (201), R refused".
local priority = os.getenv("PRIORITY") or "mixed"
local command = os.getenv("COMMAND") or "true"
local high_fraction = tonumber(os.getenv("HIGH_FRACTION") or "0.5")
local total = tonumber(os.getenv("TOTAL") or "0")
local thread_total = tonumber(os.getenv("THREADS") or "1")

local function body(p)
  return string.format('{"priority":"%s","gpu_count":1,"command":"%s","name":"wrk"}', p, command)
end

wrk.method = "POST"
wrk.path = "/api/v1/tasks"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("TOKEN") then wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN") end

local bodies = { body("high"), body("low") }
local n = 0

-- Per-thread state (each wrk thread has its own Lua state).
local threads = {}
local thread_count = 0
setup = function(thread)
  thread_count = thread_count + 1
  thread:set("index", thread_count)
  table.insert(threads, thread)
end

init = function(args)
  share = 0
  if total > 0 then
    share = math.floor(total / thread_total)
    if index <= total % thread_total then share = share + 1 end
  end
  sent, answered, accepted, refused = 0, 0, 0, 0
  -- wrk calls request() once more in its first thread, before any connection, to inspect the
  -- request (script_verify_request); that call sends nothing.
  if index == 1 then sent = -1 end
end

local function next_body()
  n = n + 1
  if priority ~= "mixed" then return body(priority) end
  -- Request n is high when floor(n * F) steps up: F of all requests, spread evenly.
  local high = math.floor(n * high_fraction) > math.floor((n - 1) * high_fraction)
  return high and bodies[1] or bodies[2]
end

-- Only what a mode needs is defined: wrk sends a static request fastest, and calls response()
-- only when the script defines it.
if total > 0 then
  request = function()
    if sent >= share then return wrk.format("GET", "/healthz", nil, "") end
    sent = sent + 1
    return wrk.format(nil, nil, nil, next_body())
  end
  response = function(status, headers, body)
    if status == 200 then return end  -- A GET /healthz sent after the share.
    answered = answered + 1
    if status == 201 then accepted = accepted + 1 else refused = refused + 1 end
    if answered >= share then wrk.thread:stop() end
  end
elseif priority == "mixed" then
  request = function() return wrk.format(nil, nil, nil, next_body()) end
else
  wrk.body = body(priority)
end

done = function(summary, latency, requests)
  if total == 0 then return end
  local s, a, r = 0, 0, 0
  for _, t in ipairs(threads) do
    s = s + t:get("answered")
    a = a + t:get("accepted")
    r = r + t:get("refused")
  end
  io.write(string.format("submissions: %d sent, %d accepted (201), %d refused\n", s, a, r))
end
