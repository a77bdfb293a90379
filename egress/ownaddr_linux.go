package egress

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// netlinkAddrEvents is a NETLINK_ROUTE socket in the multicast groups of
// IPv4 and IPv6 address changes, read without blocking. The messages are
// not parsed: any message (or an overflow) means "re-read".
type netlinkAddrEvents struct {
	fd  int
	buf []byte
}

func subscribeAddrEvents() (addrEvents, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening netlink socket: %w", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribing to address events: %w", err)
	}
	return &netlinkAddrEvents{fd: fd, buf: make([]byte, 16<<10)}, nil
}

// changed drains the socket and reports whether anything was queued. An
// error other than "nothing queued" (ENOBUFS after an overflow, say)
// counts as a change.
func (e *netlinkAddrEvents) changed() bool {
	got := false
	for {
		n, _, err := unix.Recvfrom(e.fd, e.buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return got
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return true
		case n == 0:
			return got
		}
		got = true
	}
}

func (e *netlinkAddrEvents) close() error { return unix.Close(e.fd) }
