-- wrk script for benches/http_clients.sh: every request is a search_docs call over the JSON API
-- with an idempotency key of its own, so each one runs the search and writes its audit row and
-- usage unit (the agent path as agents use it). The run id comes from the command line.
local counter = 0
local queries = {
  "rotate the signing key", "index settings refresh interval", "snapshot repository",
  "cluster health", "match phrase query", "security plugin roles", "shard allocation",
  "bulk request size",
}
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  run = args[1] or "run"
end

function request()
  counter = counter + 1
  local body = '{"query":"' .. queries[(counter % #queries) + 1] .. '","top_k":10}'
  local headers = {
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = "wrk-" .. run .. "-" .. tid .. "-" .. counter,
  }
  return wrk.format("POST", "/v1/tools/search_docs", headers, body)
end
