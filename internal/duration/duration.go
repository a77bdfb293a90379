// Package duration is the YAML duration every config section shares. It is
// a leaf with no I/O, so any package's Config can embed it.
package duration

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration that reads "30s" or a number of seconds in
// YAML and writes the Go form.
type Duration time.Duration

// UnmarshalYAML accepts Go duration strings and plain integers (seconds).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	if v, err := time.ParseDuration(s); err == nil {
		*d = Duration(v)
		return nil
	}
	var secs int64
	if err := n.Decode(&secs); err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 30s or 5m)", n.Line, s)
	}
	*d = Duration(time.Duration(secs) * time.Second)
	return nil
}

// MarshalYAML writes the Go duration form.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
