-- wrk script: durable task submissions, POST /api/v1/tasks with a JSON body.
--   wrk -t2 -c64 -d10s --latency -s bench/rest_submit.lua http://127.0.0.1:8080
-- PRIORITY=high|low|mixed (default mixed: alternate per request); COMMAND (default "true").
local priority = os.getenv("PRIORITY") or "mixed"
local command = os.getenv("COMMAND") or "true"

local function body(p)
  return string.format('{"priority":"%s","gpu_count":1,"command":"%s","name":"wrk"}', p, command)
end

wrk.method = "POST"
wrk.path = "/api/v1/tasks"
wrk.headers["Content-Type"] = "application/json"

local bodies = { body("high"), body("low") }
local n = 0

if priority == "mixed" then
  request = function()
    n = n + 1
    return wrk.format(nil, nil, nil, bodies[n % 2 + 1])
  end
else
  wrk.body = body(priority)
end
