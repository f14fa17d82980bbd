-- wrk script of bench/simulator.sh: every request is a GET of a path picked
-- at random from the file given after `--` (one path a line, written by
-- `simulator gen`), with the harness's API key; done() prints the figures
-- on one line for the script to read.
--   wrk -t2 -c64 -d30s -s bench/simulator/wrk.lua http://ADDR -- PATHS_FILE
local paths = {}

function init(args)
  local file = args[1] or error("wrk.lua: give the paths file after --")
  for line in io.lines(file) do
    paths[#paths + 1] = line
  end
  -- each thread has its own Lua state: seed it apart from the others
  math.randomseed(os.time() + tonumber(tostring(paths):match("0x(%x+)") or "0", 16) % 100000)
  wrk.headers["X-API-Key"] = "bench-key"
end

function request()
  return wrk.format("GET", paths[math.random(#paths)])
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local errs = summary.errors
  io.write(string.format(
    "RESULT requests=%d seconds=%.1f rps=%.0f p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f non2xx=%d connect_err=%d read_err=%d write_err=%d timeouts=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000,
    errs.status, errs.connect, errs.read, errs.write, errs.timeout))
end
