// Package duration is the YAML duration every config section shares. It is
// a leaf with no I/O, so any package's Config can embed it.
package duration

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration that reads "30s" or a number of seconds in
// YAML and writes the Go form.
type Duration time.Duration

// Parse errors.
var (
	ErrNegative = errors.New("duration is negative")
	ErrTooLong  = errors.New("duration is too long")
	ErrSyntax   = errors.New("not a duration (like 30s or 5m)")
)

// MaxSeconds is the largest plain number of seconds Parse accepts: more
// would overflow time.Duration (about 292 years).
const MaxSeconds = int64(math.MaxInt64 / int64(time.Second))

// Parse reads a Go duration string ("1m30s") or a plain integer number of
// seconds. Negative values and values past time.Duration's range are
// errors (wrapping ErrNegative, ErrTooLong or ErrSyntax), never a wrapped
// or negative result.
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		switch {
		case secs < 0:
			return 0, fmt.Errorf("%q: %w", s, ErrNegative)
		case secs > MaxSeconds:
			return 0, fmt.Errorf("%q seconds: %w (at most %d)", s, ErrTooLong, MaxSeconds)
		}
		return time.Duration(secs) * time.Second, nil
	} else if errors.Is(err, strconv.ErrRange) {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("%q: %w", s, ErrNegative)
		}
		return 0, fmt.Errorf("%q seconds: %w (at most %d)", s, ErrTooLong, MaxSeconds)
	}
	v, err := time.ParseDuration(s) // refuses values past its range too
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, ErrSyntax)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q: %w", s, ErrNegative)
	}
	return v, nil
}

// UnmarshalYAML accepts what Parse accepts.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: %w", n.Line, ErrSyntax)
	}
	v, err := Parse(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the Go duration form.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Human prints a duration for people: "850 ms", "12 s",
// "4 minutes", "3 hours", "88 days".
func Human(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return Age(d)
}

// Age prints an age in whole units: "just now", "1 minute", "5
// hours", "88 days".
func Age(d time.Duration) string {
	unit := func(n int64, s string) string {
		if n == 1 {
			return "1 " + s
		}
		return fmt.Sprintf("%d %ss", n, s)
	}
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return unit(int64(d/time.Second), "second")
	case d < time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}
