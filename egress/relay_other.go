//go:build !linux

package egress

import "net"

func tcpInfo(*net.TCPConn) (received, acked uint64, err error) { return 0, 0, errNoCounters }
