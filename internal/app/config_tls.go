package app

import "github.com/sandboxapi/sandboxapi/tlsserve"

// TLS serves HTTPS on listen (owned by tlsserve).
type TLS = tlsserve.Settings

// TLS modes (tlsserve's).
const (
	TLSOff   = tlsserve.ModeOff
	TLSACME  = tlsserve.ModeACME
	TLSLocal = tlsserve.ModeLocal
	TLSFiles = tlsserve.ModeFiles
)
