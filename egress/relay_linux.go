package egress

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpInfo reads the kernel's count of bytes received on c and of bytes
// it sent that the peer acknowledged (Linux 4.2 or later).
func tcpInfo(c *net.TCPConn) (received, acked uint64, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return 0, 0, err
	}
	if ierr != nil {
		return 0, 0, ierr
	}
	return info.Bytes_received, info.Bytes_acked, nil
}
