-- The simulator's default entry file (the Lua contract): every entry
-- function calls its built-in in the preloaded module svcpf. An operator's
-- lua.file can wrap or replace any of them; see docs/simulator.md.
local svcpf = require("svcpf")

function lookup_domain(req) return svcpf.lookup_domain(req) end
function simulate_user(req) return svcpf.simulate_user(req) end
function codemappings() return svcpf.codemappings() end
function maintenance() return svcpf.maintenance() end
function info() return svcpf.info() end
