package wire

import (
	"example.com/bad/internal/disk"
	"net/http"
)

// Reply is written straight to a connection: I/O in a leaf.
func Reply(w http.ResponseWriter) { _, _ = w.Write(disk.Read()) }
