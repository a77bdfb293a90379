package config

import (
	"math"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true},
		{"256M", 256 << 20, true},
		{"2g", 2 << 30, true},
		{"64K", 64 << 10, true},
		{"8589934591G", 8589934591 << 30, true},
		{"9223372036854775807", math.MaxInt64, true},
		// Products past int64 are refused, not wrapped into negative sizes.
		{"8589934592G", 0, false},
		{"10000000000G", 0, false},
		{"9223372036854775807K", 0, false},
		{"9223372036854775808", 0, false},
		{"", 0, false},
		{"0", 0, false},
		{"-1M", 0, false},
		{"+1M", 0, false},
		{"01M", 0, false},
		{"1.5G", 0, false},
		{"1GiB", 0, false},
		{"M", 0, false},
		{" 1M", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
