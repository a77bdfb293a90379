// Package e2b serves E2B's API on top of sandboxapi's sessions, so that
// agents written for E2B's SDKs run here unchanged (issue 25; the mapping
// and what is not supported are in docs/e2b.md):
//
//   - the control plane under /e2b (E2B_API_URL=http://HOST:PORT/e2b):
//     create, list, info, kill, set timeout, pause, connect, fork,
//     network update, metrics; an E2B sandbox is a session of ours, its
//     timeout the session's idle TTL and the record's end, pause a
//     hibernation, allowOut the session's allow-list (network.go: E2B's
//     open internet is never given), a fork a /v1 fork with a record of
//     its own (fork.go);
//   - sandbox traffic under /e2b/sandbox (E2B_SANDBOX_URL), for the
//     sandbox named by E2b-Sandbox-Id and authenticated by its access
//     token: envd's /health and /files and its Connect-RPC filesystem
//     service (connectrpc.com/connect over code generated from envd's
//     protos, e2b/gen.sh), and its process service (commands and PTY)
//     over the session's background processes (process.go); and, told
//     apart by E2b-Sandbox-Port 49999, @e2b/code-interpreter's cells and
//     contexts over the session's kernel (interpreter.go: a
//     code-interpreter-v1 sandbox is a kernel session).
//
// # Why a client of the API, not of the services
//
// The adapter must apply plans, quotas, rate limits, metering and cluster
// forwarding exactly as /v1 does. It gets that by being a client of /v1
// in process, as mcp is over HTTP: each E2B call becomes /v1 calls made
// as http.Handler round trips (apicall.go) through the handler that
// serves /v1, the cluster's in front of it on a cluster node, with the
// caller's own API key. So every rule of /v1 applies to the call it
// becomes with no second copy of any, and the adapter reaches into no
// other service (archcheck). Calling the services' interfaces instead
// would have meant repeating the API's authentication, plan checks,
// slot reservations, rate buckets and metering here, and routing each
// call to the session's owner node by hand.
//
// Sandbox traffic carries no API key, only the sandbox's access token:
// the record keeps the key sealed under a key derived from the token, and
// the token sealed under one derived from the key (seal.go), so the
// adapter acts as the sandbox's owner for exactly the calls that present
// its token, and the store alone opens neither secret.
//
// # Commands
//
// A command is a background process of the session (POST
// /v1/sessions/{id}/processes, /bin/bash -l -c CMD as E2B runs it), and
// its events are the process's /v1 output stream read in process
// (procstream.go) and sent on one by one as envd's; the adapter keeps no
// table of its own, so any node serves any call of it.
//
// # State
//
// The adapter holds nothing in memory: what E2B reports and our sessions
// do not hold (template, metadata, sealed env vars and secrets, the
// timeout's end) is a row of the store's e2b_sandboxes, read by any node
// and kept across restarts.
//
// # Files
//
// Uploads and downloads are our files API (PUT and GET
// /v1/sessions/{id}/files, streamed). Stat, make dir, move, remove and
// list with depth are the files API's operations (files/stat, files/mkdir,
// files/move, DELETE files, ?depth=), which the sandbox's pid 1 does as
// its unprivileged user on its own symlink-refusing walk: the host never
// touches a path the sandbox controls, and no execute is spent. E2B's home
// /home/user is our /home/sandbox (paths.go); only the home is served.
package e2b
