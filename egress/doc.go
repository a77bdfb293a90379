// Package egress is the only way out of a sandbox: an HTTPS-only egress
// proxy with per-session allow-lists and DNS pinning, the in-sandbox DNS
// server, and the Linux wiring (netns, veth, nftables) that leaves the
// proxy as the sandbox's only reachable address.
//
// # Session identification
//
// Every session gets its own /30 from Config.Network.Pool: HostAddr (.1)
// on the host side of its veth pair and SandboxAddr (.2) inside its netns.
// Proxy.AddSession binds the session's listeners (explicit CONNECT,
// transparent SNI on 443, DNS on 53) to HostAddr, so a connection's
// session is the address it was accepted on; the proxy also requires the
// peer address to be SandboxAddr. The nftables rules of Network only let
// packets from a session's veth with source SandboxAddr reach HostAddr on
// the proxy ports, so one sandbox cannot reach another session's
// listeners, and nothing the sandbox sends (headers, credentials, SNI)
// selects the session.
//
// # Wiring
//
// Sessions is the whole as one service (what the executor's Network
// interface asks for): NewSessions, then Reconcile with the live sessions
// at start, Attach and Detach per session with network, Stop at the end.
// Its parts, for tests and for the installers' network (NewServiceNetwork):
//
//	net, _ := egress.NewNetwork(cfg, logger)
//	net.Reconcile(ctx, liveSessionIDs)          // at start
//	proxy, _ := egress.NewProxy(cfg, egress.Options{Logger: logger})
//	att, _ := net.Setup(ctx, id)                // per session with network
//	proxy.AddSession(ctx, egress.Session{ID: id, HostAddr: att.HostAddr,
//		SandboxAddr: att.SandboxAddr, Policy: pol})
//	// OCI spec: linux.namespaces += {type: network, path: att.NetnsPath};
//	// runsc --network=sandbox; /etc/resolv.conf = att.ResolvConf();
//	// env += att.ProxyEnv(cfg.ConnectPort)
//	...
//	proxy.RemoveSession(ctx, id); net.Teardown(ctx, id)
//
// # Decisions
//
// The proxy asks one question of the session's rules, policy.Vetter.Decide
// (a host name alone before resolving it, then each address it resolved
// to; an address target once), and records the typed answer's entry and
// address class in the audit (Decision.Rule, Decision.AddrClass). Every
// CONNECT or transparent connection yields one Decision, kept in a
// per-session ring (Proxy.Decisions) and passed to Options.Observe.
// Allowed tunnels are recorded when they close, with byte counts and
// duration. What is logged (Info allow, Warn deny, Error failure) and
// passed to Options.OnDecision is bounded per session and minute
// (Config.AuditRecordsPerMinute): repeated refusals become one record
// with a count, decisions past the cap summary records per mode and
// outcome, so a looping sandbox cannot grow the host's log and store
// without bound.
package egress
