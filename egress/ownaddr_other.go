//go:build !linux

package egress

import "errors"

// Without address events every lookup re-reads the interfaces.
func subscribeAddrEvents() (addrEvents, error) {
	return nil, errors.New("address events need Linux")
}
