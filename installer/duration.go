package installer

import "github.com/sandboxapi/sandboxapi/internal/duration"

// Duration is the shared YAML duration.
type Duration = duration.Duration
